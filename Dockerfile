# seckill API image: a static, pure-Go binary on distroless (no shell, no curl).
#
#   docker build -t seckill .
#   docker run --rm -p 8080:8080 seckill     # embedded backends, prints the admin token
#
# Health checking: this image deliberately has no HEALTHCHECK and nothing to run one with.
# In docker-compose.yml the api replicas are not health-checked themselves; the nginx proxy
# `lb` (which has busybox wget) health-checks its own /healthz, which is passed through to
# the replicas, and nginx routes around a replica that refuses connections.

############################
# build stage
############################
FROM golang:1.26 AS build

WORKDIR /src
# Pure Go (the embedded SQLite is modernc, no cgo). The golang image pins GOTOOLCHAIN=local;
# "auto" lets an older 1.26.x image fetch the toolchain that go.mod asks for instead of failing.
ENV CGO_ENABLED=0 \
    GOTOOLCHAIN=auto

# Module downloads get their own layer: it is rebuilt only when go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
RUN --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/seckill ./cmd/api

# Writable directory for the embedded backends (SECKILL_DATA_DIR) when the image is run
# without external MySQL/Redis/etcd. Distroless has no mkdir, so it is prepared here.
RUN mkdir -p /out/data

############################
# runtime stage
############################
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /out/seckill /seckill
COPY --from=build --chown=65532:65532 /out/data /data

ENV SECKILL_ADDR=:8080 \
    SECKILL_DATA_DIR=/data

USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/seckill"]
