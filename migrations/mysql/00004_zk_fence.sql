-- +goose Up
-- zk_fence is the fencing token of the last write made under the ZooKeeper lock: the creation
-- zxid of its holder's lock node. It is a column of its own, apart from etcd's fence, because
-- an etcd revision and a zxid are different sequences: a product sold under one lock service and
-- then the other must compare each token only with its own kind. A reset sets it back to 0.
ALTER TABLE products ADD COLUMN zk_fence BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE products DROP COLUMN zk_fence;
