# megaconn in a container: `docker build -t megaconn:latest .` (the image
# deploy/k8s/ refers to; docs/kubernetes.md has the steps). The build
# context is trimmed by .dockerignore (no target/, .git or node_modules).
#
# The runtime image runs as an unprivileged user (uid 10001). server,
# client, merge and `tune` (read-only) need no capability; what does
# (tune --apply, bench in private namespaces) is listed in
# docs/kubernetes.md ("The image and its privileges").
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked

FROM debian:bookworm-slim
# iproute2 for `ss` and namespaces, procps for sysctl.
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 procps \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin megaconn
COPY --from=build /src/target/release/megaconn /usr/local/bin/megaconn
# Numeric, so Kubernetes' runAsNonRoot can check it without /etc/passwd.
USER 10001:10001
ENTRYPOINT ["megaconn"]
