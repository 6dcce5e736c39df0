-- +goose Up
-- See mysql/00002_fence.sql.
ALTER TABLE products ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE products DROP COLUMN fence;
