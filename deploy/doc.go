// Package deploy holds the files that run seckill beside its monitoring — nginx in front of the
// replicas, Prometheus's configuration, rules and rule tests, the Grafana dashboards and their
// provisioning — which docker-compose.yml at the repository root mounts, the Helm chart that runs
// the replicas on Kubernetes (helm/seckill), and the tests that keep them true: the Compose file
// is valid and wired to them, the rules pass promtool and their unit tests, every metric the
// dashboards and rules read is one the service exposes, and the chart renders, for each of its
// values sets, objects Kubernetes accepts that fit the service.
package deploy
