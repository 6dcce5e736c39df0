// Package docs holds the project's documentation pages — README.md is the front door, each
// page here one topic — and the tests that keep them true: every relative link and anchor
// resolves; every test, flag, SECKILL_ variable, metric, alert and Redis key they name exists in
// the code; every measured table says which command, commit and machine produced it; every page
// is under 400 lines and cites no issue number; and the several-instances recipe of
// operations.md runs as the page gives it.
package docs
