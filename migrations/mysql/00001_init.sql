-- +goose Up
-- products is one row per SKU: the hot row of a flash sale. Every stock decrement is a
-- conditional UPDATE on it; version increases on every sale and every reset so that an
-- optimistic writer holding a stale read can never write.
-- utf8mb4_bin keeps SKUs and user ids exact: "ABC" and "abc" are different products.
CREATE TABLE products (
    sku           VARCHAR(64)  NOT NULL,
    name          VARCHAR(128) NOT NULL,
    initial_stock BIGINT       NOT NULL,
    stock         BIGINT       NOT NULL,
    version       BIGINT       NOT NULL DEFAULT 1,
    max_per_order INT          NOT NULL DEFAULT 1,
    created_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (sku),
    -- A last line of defence: no code path may drive stock below zero. The naive strategy
    -- oversells by lost updates (stock stays >= 0, orders exceed it), which this cannot see and
    -- the audit does.
    CONSTRAINT chk_products_stock CHECK (stock >= 0),
    CONSTRAINT chk_products_max_per_order CHECK (max_per_order >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- orders holds one row per sale. The unique key on (sku, user_id) is what finally enforces one
-- order per user per product, whatever a lock did; the unique idempotency_key (NULL when the
-- client sent none) makes a retried request find its original order instead of buying twice.
CREATE TABLE orders (
    order_id        CHAR(26)     NOT NULL,
    sku             VARCHAR(64)  NOT NULL,
    user_id         VARCHAR(64)  NOT NULL,
    quantity        INT          NOT NULL,
    strategy        VARCHAR(32)  NOT NULL,
    idempotency_key VARCHAR(128) NULL,
    request_hash    CHAR(64)     NOT NULL,
    created_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (order_id),
    UNIQUE KEY uq_orders_sku_user (sku, user_id),
    UNIQUE KEY uq_orders_idempotency_key (idempotency_key),
    CONSTRAINT chk_orders_quantity CHECK (quantity >= 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- distributed_locks is the lock table of the classic comparison (the dblock strategy): a row
-- exists while its lock is held. The primary key makes INSERT the atomic acquire.
CREATE TABLE distributed_locks (
    lock_name VARCHAR(128) NOT NULL,
    holder    VARCHAR(128) NOT NULL,
    expire_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (lock_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE distributed_locks;
DROP TABLE orders;
DROP TABLE products;
