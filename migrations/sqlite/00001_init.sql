-- +goose Up
-- The embedded store's schema: the same tables and guards as mysql/00001_init.sql (read the
-- comments there), in SQLite's types. Times are stored as UTC text in a sortable format.
CREATE TABLE products (
    sku           TEXT    NOT NULL PRIMARY KEY,
    name          TEXT    NOT NULL,
    initial_stock INTEGER NOT NULL,
    stock         INTEGER NOT NULL CHECK (stock >= 0),
    version       INTEGER NOT NULL DEFAULT 1,
    max_per_order INTEGER NOT NULL DEFAULT 1 CHECK (max_per_order >= 1),
    created_at    DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE TABLE orders (
    order_id        TEXT    NOT NULL PRIMARY KEY,
    sku             TEXT    NOT NULL,
    user_id         TEXT    NOT NULL,
    quantity        INTEGER NOT NULL CHECK (quantity >= 1),
    strategy        TEXT    NOT NULL,
    idempotency_key TEXT    NULL,
    request_hash    TEXT    NOT NULL,
    created_at      DATETIME NOT NULL
);
CREATE UNIQUE INDEX uq_orders_sku_user ON orders (sku, user_id);
CREATE UNIQUE INDEX uq_orders_idempotency_key ON orders (idempotency_key);

CREATE TABLE distributed_locks (
    lock_name TEXT NOT NULL PRIMARY KEY,
    holder    TEXT NOT NULL,
    expire_at TEXT NOT NULL
);

-- +goose Down
DROP TABLE distributed_locks;
DROP TABLE orders;
DROP TABLE products;
