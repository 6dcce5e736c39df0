-- +goose Up
-- A product's waiting room (docs/frontdoor.md): buyers let in at room_admit_per_s for the
-- whole deployment, each with a pass good for room_pass_ttl_s. NULL: no waiting room, and both
-- are set or neither. The bounds are the contract's, kept here too so that no writer stores a
-- room the service would refuse.
ALTER TABLE products
    ADD COLUMN room_admit_per_s INT NULL,
    ADD COLUMN room_pass_ttl_s  INT NULL,
    ADD CONSTRAINT chk_products_room CHECK (
        (room_admit_per_s IS NULL AND room_pass_ttl_s IS NULL) OR
        (room_admit_per_s BETWEEN 1 AND 100000 AND room_pass_ttl_s BETWEEN 10 AND 3600));

-- +goose Down
ALTER TABLE products
    DROP CONSTRAINT chk_products_room,
    DROP COLUMN room_pass_ttl_s,
    DROP COLUMN room_admit_per_s;
