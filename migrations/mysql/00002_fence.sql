-- +goose Up
-- fence is the fencing token of the last write made under the etcd lock (the revision at which
-- its holder was granted the lock). A write carries its holder's token and succeeds only if no
-- later holder has written (fence <= token), so a holder whose lease expired while it was paused
-- can never write after its successor. A product reset sets it back to 0.
ALTER TABLE products ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE products DROP COLUMN fence;
