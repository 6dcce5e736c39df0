// Package docs holds the project's documentation pages — README.md is the front door, each
// page here one topic — and the tests that keep them true: every relative link and anchor
// resolves, every test, flag, SECKILL_ variable, metric and alert they name exists in the code,
// and every measured table says which command, commit and machine produced it.
package docs
