-- +goose Up
-- See mysql/00003_lifecycle.sql. SQLite has partial indexes, so one active order per user per
-- product is a unique index over the active rows alone.
ALTER TABLE products ADD COLUMN starts_at DATETIME NULL;
ALTER TABLE products ADD COLUMN ends_at DATETIME NULL;
ALTER TABLE products ADD COLUMN payment_timeout_s INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN status TEXT NOT NULL DEFAULT 'confirmed'
    CHECK (status IN ('pending', 'confirmed', 'cancelled', 'expired'));
ALTER TABLE orders ADD COLUMN expires_at DATETIME NULL;
ALTER TABLE orders ADD COLUMN reservation_id TEXT NULL;
ALTER TABLE orders ADD COLUMN restock_pending INTEGER NOT NULL DEFAULT 0;
DROP INDEX uq_orders_sku_user;
CREATE UNIQUE INDEX uq_orders_sku_active_user ON orders (sku, user_id) WHERE status IN ('pending', 'confirmed');
CREATE INDEX ix_orders_sku_user ON orders (sku, user_id);
CREATE INDEX ix_orders_pending ON orders (status, expires_at);
CREATE INDEX ix_orders_restock ON orders (restock_pending);
CREATE INDEX ix_orders_reservation ON orders (reservation_id);

-- +goose Down
DROP INDEX ix_orders_reservation;
DROP INDEX ix_orders_restock;
DROP INDEX ix_orders_pending;
DROP INDEX ix_orders_sku_user;
DROP INDEX uq_orders_sku_active_user;
CREATE UNIQUE INDEX uq_orders_sku_user ON orders (sku, user_id);
ALTER TABLE orders DROP COLUMN restock_pending;
ALTER TABLE orders DROP COLUMN reservation_id;
ALTER TABLE orders DROP COLUMN expires_at;
ALTER TABLE orders DROP COLUMN status;
ALTER TABLE products DROP COLUMN payment_timeout_s;
ALTER TABLE products DROP COLUMN ends_at;
ALTER TABLE products DROP COLUMN starts_at;
