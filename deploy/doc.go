// Package deploy holds the files that run seckill beside its monitoring — nginx in front of the
// replicas, Prometheus's configuration, rules and rule tests, the Grafana dashboards and their
// provisioning — which docker-compose.yml at the repository root mounts, and the tests that keep
// them true: the Compose file is valid and wired to them, the rules pass promtool and their unit
// tests, and every metric the dashboards and rules read is one the service exposes.
package deploy
