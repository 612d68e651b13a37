# The binaries in one image: cubemaster, templatecenter (with the ext4stream
# builder plugin next to it), nodeagent and cubemastercli.
#   docker build -t cubetemplatecenter .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build BIN=/out

FROM debian:bookworm-slim
# e2fsprogs for the mkfs builder; isal's igzip decodes gzip layers about
# twice as fast as the built-in decoder; ca-certificates for HTTPS registries.
RUN apt-get update && apt-get install -y --no-install-recommends e2fsprogs isal ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/cubemaster /out/templatecenter /out/nodeagent /out/cubemastercli /out/ext4stream /usr/local/bin/
ENV CUBE_TEMPLATE_CENTER_PLUGIN_DIR=/usr/local/bin
# The services run as nobody and keep their state (databases, artifacts,
# build scratch, the node agent's files) under XDG_STATE_HOME, a volume the
# image creates and hands to that user: a fresh volume (Docker's, or a
# Kubernetes emptyDir) starts from it, so nobody can write there.
RUN install -d -o 65534 -g 65534 -m 0750 /var/lib/cube
USER 65534:65534
ENV XDG_STATE_HOME=/var/lib/cube
VOLUME ["/var/lib/cube"]
ENTRYPOINT []
CMD ["cubemaster", "--help"]
