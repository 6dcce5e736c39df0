-- +goose Up
-- The sale and the order as state machines.
--
-- A product may have a sale window (starts_at, ends_at; NULL when unset) and a payment timeout:
-- with payment_timeout_s > 0 a new order is pending until paid or until expires_at, else it is
-- confirmed at once.
ALTER TABLE products
    ADD COLUMN starts_at         DATETIME(6) NULL,
    ADD COLUMN ends_at           DATETIME(6) NULL,
    ADD COLUMN payment_timeout_s INT NOT NULL DEFAULT 0,
    ADD CONSTRAINT chk_products_window CHECK (ends_at IS NULL OR starts_at IS NULL OR ends_at > starts_at),
    ADD CONSTRAINT chk_products_payment_timeout CHECK (payment_timeout_s BETWEEN 0 AND 86400);

-- An order is pending -> confirmed, pending/confirmed -> cancelled, pending -> expired. Every
-- transition is one conditional UPDATE (WHERE status = ...), so it happens once however many
-- requests and instances race for it; one that returns units raises the product's stock in the
-- same transaction and sets restock_pending until Redis admission has them back too.
-- reservation_id is the Redis admission reservation the order was placed under (hybrid): the
-- sweeper asks by it whether a reservation became an order. Existing orders are confirmed.
ALTER TABLE orders
    ADD COLUMN status          VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    ADD COLUMN expires_at      DATETIME(6) NULL,
    ADD COLUMN reservation_id  VARCHAR(32) NULL,
    ADD COLUMN restock_pending TINYINT     NOT NULL DEFAULT 0,
    ADD CONSTRAINT chk_orders_status CHECK (status IN ('pending', 'confirmed', 'cancelled', 'expired'));

-- One active (pending or confirmed) order per user per product, whatever a lock did: the unique
-- key is on a generated column that holds the user only while the order is active (NULLs never
-- collide), so a buyer whose order was cancelled or expired may buy again. The column is stored
-- on MariaDB (/*M! */ is read by MariaDB alone) and virtual elsewhere, and is indexed by a
-- statement of its own: TiDB adds no stored generated column to a table that exists (error
-- 3106) and does not see a column in the statement that adds it. The index holds the same keys
-- either way.
ALTER TABLE orders
    ADD COLUMN active_user VARCHAR(64) GENERATED ALWAYS AS (IF(status IN ('pending', 'confirmed'), user_id, NULL)) /*M! STORED */;
ALTER TABLE orders
    ADD UNIQUE KEY uq_orders_sku_active_user (sku, active_user),
    DROP INDEX uq_orders_sku_user,
    ADD KEY ix_orders_sku_user (sku, user_id),
    ADD KEY ix_orders_pending (status, expires_at),
    ADD KEY ix_orders_restock (restock_pending),
    ADD KEY ix_orders_reservation (reservation_id);

-- +goose Down
ALTER TABLE orders
    DROP INDEX ix_orders_reservation,
    DROP INDEX ix_orders_restock,
    DROP INDEX ix_orders_pending,
    DROP INDEX uq_orders_sku_active_user,
    ADD UNIQUE KEY uq_orders_sku_user (sku, user_id),
    DROP INDEX ix_orders_sku_user,
    DROP COLUMN active_user;
ALTER TABLE orders
    DROP CONSTRAINT chk_orders_status,
    DROP COLUMN restock_pending,
    DROP COLUMN reservation_id,
    DROP COLUMN expires_at,
    DROP COLUMN status;
ALTER TABLE products
    DROP CONSTRAINT chk_products_payment_timeout,
    DROP CONSTRAINT chk_products_window,
    DROP COLUMN payment_timeout_s,
    DROP COLUMN ends_at,
    DROP COLUMN starts_at;
