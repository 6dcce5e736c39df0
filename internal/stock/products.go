package stock

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// productRow maps the products table.
type productRow struct {
	SKU             string     `gorm:"column:sku;primaryKey"`
	Name            string     `gorm:"column:name"`
	InitialStock    int64      `gorm:"column:initial_stock"`
	Stock           int64      `gorm:"column:stock"`
	Version         int64      `gorm:"column:version"`
	MaxPerOrder     int        `gorm:"column:max_per_order"`
	Fence           int64      `gorm:"column:fence"`
	ZKFence         int64      `gorm:"column:zk_fence"`
	StartsAt        *time.Time `gorm:"column:starts_at"`
	EndsAt          *time.Time `gorm:"column:ends_at"`
	PaymentTimeoutS int        `gorm:"column:payment_timeout_s"`
	RoomAdmitPerS   *int       `gorm:"column:room_admit_per_s"`
	RoomPassTTLS    *int       `gorm:"column:room_pass_ttl_s"`
}

func (productRow) TableName() string { return "products" }

func (r productRow) product() Product {
	p := Product{SKU: r.SKU, Name: r.Name, InitialStock: r.InitialStock, Stock: r.Stock, Version: r.Version,
		MaxPerOrder: r.MaxPerOrder, Fence: r.Fence, ZKFence: r.ZKFence, PaymentTimeout: time.Duration(r.PaymentTimeoutS) * time.Second}
	if r.StartsAt != nil {
		p.Window.Starts = r.StartsAt.UTC()
	}
	if r.EndsAt != nil {
		p.Window.Ends = r.EndsAt.UTC()
	}
	if r.RoomAdmitPerS != nil && r.RoomPassTTLS != nil {
		p.WaitingRoom = &WaitingRoom{AdmitPerS: *r.RoomAdmitPerS, PassTTL: time.Duration(*r.RoomPassTTLS) * time.Second}
	}
	return p
}

// roomColumns are room as the products table's two nullable columns.
func roomColumns(room *WaitingRoom) (admitPerS, passTTLS *int) {
	if room == nil {
		return nil, nil
	}
	rate, ttl := room.AdmitPerS, int(room.PassTTL/time.Second)
	return &rate, &ttl
}

// fence is the row's last token of one kind.
func (r productRow) fence(f Fence) int64 {
	if f == ZooKeeperFence {
		return r.ZKFence
	}
	return r.Fence
}

// ProductSpec is what an admin sets when starting a sale round.
type ProductSpec struct {
	SKU            string
	Name           string
	Stock          int64
	MaxPerOrder    int
	Window         Window
	PaymentTimeout time.Duration // whole seconds
	WaitingRoom    *WaitingRoom  // nil: none
}

// column is t as a nullable column: nil when t is zero.
func column(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// PutProduct starts a sale round in one transaction: it creates the product or resets it, its
// orders deleted, its version bumped (never reset: a writer holding an old round's version
// cannot write into the new one) and its fences set to 0 (a replaced etcd or ZooKeeper cluster,
// whose tokens start again low, is recovered by a reset).
func (s *Store) PutProduct(ctx context.Context, spec ProductSpec) (Product, error) {
	var out productRow
	err := s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		admitPerS, passTTLS := roomColumns(spec.WaitingRoom)
		row := productRow{SKU: spec.SKU, Name: spec.Name, InitialStock: spec.Stock, Stock: spec.Stock, Version: 1, MaxPerOrder: spec.MaxPerOrder,
			StartsAt: column(spec.Window.Starts), EndsAt: column(spec.Window.Ends), PaymentTimeoutS: int(spec.PaymentTimeout / time.Second),
			RoomAdmitPerS: admitPerS, RoomPassTTLS: passTTLS}
		// One upsert: an update of a missing row locks its gap, and two resets of new products
		// then deadlock on each other's gaps. The fences come from the new row: 0.
		reset := clause.OnConflict{Columns: []clause.Column{{Name: "sku"}}, DoUpdates: append(clause.AssignmentColumns([]string{
			"name", "initial_stock", "stock", "max_per_order", "starts_at", "ends_at", "payment_timeout_s",
			"room_admit_per_s", "room_pass_ttl_s", "fence", "zk_fence",
		}), clause.Assignments(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": time.Now().UTC()})...)}
		if err := tx.Clauses(reset).Create(&row).Error; err != nil {
			return err
		}
		if err := tx.Where("sku = ?", spec.SKU).Delete(&orderRow{}).Error; err != nil {
			return err
		}
		return tx.Where("sku = ?", spec.SKU).Take(&out).Error
	})
	if err != nil {
		return Product{}, fmt.Errorf("put product %s: %w", spec.SKU, err)
	}
	return out.product(), nil
}

// Product reads one product.
func (s *Store) Product(ctx context.Context, sku string) (Product, error) {
	var row productRow
	if err := classify(s.db.WithContext(ctx).Where("sku = ?", sku).Take(&row).Error); err != nil {
		return Product{}, fmt.Errorf("product %s: %w", sku, err)
	}
	return row.product(), nil
}

// Products lists up to limit products, by SKU, for the sale page's index.
func (s *Store) Products(ctx context.Context, limit int) ([]Product, error) {
	var rows []productRow
	if err := classify(s.db.WithContext(ctx).Order("sku").Limit(limit).Find(&rows).Error); err != nil {
		return nil, fmt.Errorf("products: %w", err)
	}
	out := make([]Product, len(rows))
	for i, r := range rows {
		out[i] = r.product()
	}
	return out, nil
}

// DeleteProduct removes a product and its orders. Tests use it to clean up after themselves.
func (s *Store) DeleteProduct(ctx context.Context, sku string) error {
	return s.withTx(ctx, s.db, func(tx *gorm.DB) error {
		if err := tx.Where("sku = ?", sku).Delete(&orderRow{}).Error; err != nil {
			return err
		}
		return tx.Where("sku = ?", sku).Delete(&productRow{}).Error
	})
}

// Audit reads the product and the sums of its orders per state in one statement, so both come
// from one snapshot even while orders are being placed.
func (s *Store) Audit(ctx context.Context, sku string) (Audit, error) {
	var rows []Audit
	err := s.db.WithContext(ctx).Raw(`
		SELECT p.sku AS sku, p.initial_stock AS initial_stock, p.stock AS stock,
		       COALESCE(SUM(CASE WHEN o.status IN ('pending', 'confirmed') THEN o.quantity END), 0) AS ordered_quantity,
		       COUNT(CASE WHEN o.status IN ('pending', 'confirmed') THEN 1 END) AS orders,
		       COUNT(DISTINCT CASE WHEN o.status IN ('pending', 'confirmed') THEN o.user_id END) AS distinct_buyers,
		       COUNT(CASE WHEN o.status = 'pending' THEN 1 END) AS pending,
		       COUNT(CASE WHEN o.status = 'cancelled' THEN 1 END) AS cancelled,
		       COUNT(CASE WHEN o.status = 'expired' THEN 1 END) AS expired
		FROM products p LEFT JOIN orders o ON o.sku = p.sku
		WHERE p.sku = ?
		GROUP BY p.sku, p.initial_stock, p.stock`, sku).Scan(&rows).Error
	if err != nil {
		return Audit{}, fmt.Errorf("audit %s: %w", sku, classify(err))
	}
	if len(rows) == 0 {
		return Audit{}, fmt.Errorf("audit %s: %w", sku, ErrNotFound)
	}
	return rows[0], nil
}
