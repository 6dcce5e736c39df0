-- +goose Up
-- See mysql/00004_zk_fence.sql.
ALTER TABLE products ADD COLUMN zk_fence INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE products DROP COLUMN zk_fence;
