# toolgate in a container: one static binary for `toolgate worker`,
# `toolgate serve`, `toolgate health` and the CLI verbs.
#
#   docker build -t toolgate .
#
# The binary links the embedded Temporal server of `toolgate dev`, so a cold
# build takes minutes and the linker needs ~3 GB of memory.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-trixie AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
# Dependencies first: this layer is reused until go.mod or go.sum changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -ldflags="-s -w" -o /out/toolgate ./cmd/toolgate \
 && go build -ldflags="-s -w" -o /out/toolgate-sandbox ./cmd/toolgate-sandbox \
 && /out/toolgate --help >/dev/null

# Debian slim, not distroless: the built-in shell tool runs /bin/sh -c in the
# workspace, and agents' commands expect coreutils. Add the tools your
# agents' shell calls need in an image built FROM this one.
FROM debian:trixie-slim
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN useradd --uid 10001 --user-group --home-dir /workspace --no-create-home --shell /usr/sbin/nologin toolgate \
 && mkdir -p /workspace /etc/toolgate /var/lib/toolgate \
 && chown toolgate:toolgate /workspace /var/lib/toolgate
# toolgate-sandbox beside toolgate: it starts each tool's sandboxed process.
COPY --from=build /out/toolgate /out/toolgate-sandbox /usr/local/bin/
USER 10001:10001
WORKDIR /workspace
# 7700: `toolgate serve` (API, inbox, Slack/email endpoints, /metrics);
# 9090: a worker's /metrics.
EXPOSE 7700 9090
ENTRYPOINT ["toolgate"]
CMD ["--help"]
