# megaconn in a container: `docker build -t megaconn:latest .` (the image
# deploy/k8s/ refers to). iproute2 for `ss` and namespaces, procps for sysctl.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends iproute2 procps && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/megaconn /usr/local/bin/megaconn
ENTRYPOINT ["megaconn"]
