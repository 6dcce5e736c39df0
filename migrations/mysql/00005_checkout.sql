-- +goose Up
-- checkout_id ties the lines of one checkout together: one order row per product, all placed in
-- one transaction or none, all in one status. NULL for a single-product order. The index serves
-- the reads of a whole checkout (its answer, pay, cancel, expiry).
ALTER TABLE orders ADD COLUMN checkout_id CHAR(26) NULL;
CREATE INDEX idx_orders_checkout_id ON orders (checkout_id);

-- +goose Down
DROP INDEX idx_orders_checkout_id ON orders;
ALTER TABLE orders DROP COLUMN checkout_id;
