-- +goose Up
-- See mysql/00005_checkout.sql.
ALTER TABLE orders ADD COLUMN checkout_id TEXT NULL;
CREATE INDEX idx_orders_checkout_id ON orders (checkout_id);

-- +goose Down
DROP INDEX idx_orders_checkout_id;
ALTER TABLE orders DROP COLUMN checkout_id;
