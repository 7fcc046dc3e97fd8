# syntax=docker/dockerfile:1
# The headroom service image.
#   docker build -t headroom .                          # simulated cloud only (the default build)
#   docker build --build-arg FEATURES=aws -t headroom . # with the AWS provider (gcp, or aws,gcp)
# Orchestrators probe GET /readyz (200 while the ledger answers and the loop ticks) and GET /healthz (process alive)
# on port 8080; the Terraform modules in terraform/ do.

ARG RUST_VERSION=1.94

FROM rust:${RUST_VERSION}-slim-bookworm AS build
# Cargo features of the binary: "" (simulated cloud), "aws", "gcp" or "aws,gcp".
ARG FEATURES=""
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked ${FEATURES:+--features "$FEATURES"} \
    && cp target/release/headroom /usr/local/bin/headroom

FROM debian:bookworm-slim AS runtime
# ca-certificates: HTTPS to cloud APIs and webhooks.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/headroom --create-home headroom \
    && install -d -o headroom -g headroom /run/headroom
# /run/headroom: scratch space for a configuration written at start when the root filesystem is
# read-only (terraform/modules/aws mounts a task volume there; a volume takes this ownership).
COPY --from=build /usr/local/bin/headroom /usr/local/bin/headroom
# The binary embeds its migrations (sqlx::migrate!); these copies are for DBAs to read.
COPY migrations /usr/share/headroom/migrations
# Default configuration: the documented example on the simulated cloud. Deployments mount their
# own file and pass --config (terraform/ does).
COPY config/headroom.example.toml /etc/headroom/headroom.toml
USER 10001:10001
WORKDIR /var/lib/headroom
EXPOSE 8080
# No curl in the image: bash's /dev/tcp asks /readyz for its status line.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /readyz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["headroom"]
CMD ["serve", "--config", "/etc/headroom/headroom.toml", "--listen", "0.0.0.0:8080"]
