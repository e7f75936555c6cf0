# ContextService image: `docker build -t contextsvc:0.1.0 .` (the tag deploy/k8s runs).
# Stage 1 compiles the Cython hot path and generates the gRPC stubs into wheels (pip wheel runs
# setup.py); stage 2 holds only the installed wheels, runs as a non-root user and refuses to
# build if the hot path did not compile (the Python twin would serve, several times slower).

FROM python:3.11.7-bookworm AS build
WORKDIR /src
# the build's inputs only (.dockerignore keeps tests, benches and clients' node_modules out)
COPY pyproject.toml setup.py README.md ./
COPY _native/ _native/
COPY proto/ proto/
COPY server/ server/
COPY clients/python/ clients/python/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.7-slim-bookworm
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl \
    && rm -rf /wheels \
    && python -c "from contextsvc import native; assert native.IMPLEMENTATION == 'cython', native.IMPLEMENTATION" \
    && useradd --system --uid 10001 --user-group --no-create-home contextsvc
# a read-only root file system: caches and the local store go to a volume mounted here
ENV XDG_CACHE_HOME=/var/cache/contextsvc PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 50051 9464
ENTRYPOINT ["contextsvc"]
CMD ["serve", "--host", "0.0.0.0"]
