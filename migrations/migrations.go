// Package migrations embeds the versioned SQL schema, one folder per dialect, so that the service
// binary carries its schema and never reads the source tree at run time. The store applies them
// at start with goose.
package migrations

import "embed"

// FS holds mysql/*.sql (MySQL 8, MariaDB 10.11) and sqlite/*.sql (the embedded store).
//
//go:embed mysql/*.sql sqlite/*.sql
var FS embed.FS
