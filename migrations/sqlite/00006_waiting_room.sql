-- +goose Up
-- See mysql/00006_waiting_room.sql.
ALTER TABLE products ADD COLUMN room_admit_per_s INTEGER NULL;
ALTER TABLE products ADD COLUMN room_pass_ttl_s INTEGER NULL;

-- +goose Down
ALTER TABLE products DROP COLUMN room_pass_ttl_s;
ALTER TABLE products DROP COLUMN room_admit_per_s;
