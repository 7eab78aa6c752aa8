#!/usr/bin/env bash
# A serving process on the H200 with an empty cache directory loads the shipped manifests
# from Redis, verified against the pinned lock, and compiles nothing.
#
#   bash benchmarks/device/h200_remote_load.sh REDIS_DEBS_DIR CACHE_DIR
#
# REDIS_DEBS_DIR holds Debian's redis-server, redis-tools, libjemalloc2 and liblzf1
# (`apt-get download` them here: the device machine has no network); CACHE_DIR is the
# shipped manifests compiled for cuda:90 on a CPU machine. Run from the repo root, with
# jitkern and redis-py importable.
set -euo pipefail
debs=$1 cache=$2
manifests=(warmup_manifests/*.json)
for deb in "$debs"/*.deb; do dpkg -x "$deb" /tmp/redis-root; done
export LD_LIBRARY_PATH=/tmp/redis-root/usr/lib/x86_64-linux-gnu
/tmp/redis-root/usr/bin/redis-server --port 6399 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --logfile /tmp/redis.log
url=redis://127.0.0.1:6399/0
sleep 0.5
echo "=== publish (every key is in the cache already: nothing compiles)"
python3 -m jitkern.warmup "${manifests[@]}" --target cuda:90 --cache-dir "$cache" --remote "$url" --no-progress \
  | tee /tmp/publish.log
digest=$(sed -n 's/^published to .*lock sha256 \([0-9a-f]*\).*/\1/p' /tmp/publish.log)  # the deployment's lock
echo "=== check Redis alone, against the pinned lock $digest"
JITKERN_LOCK_DIGEST=$digest python3 -m jitkern.warmup "${manifests[@]}" --target cuda:90 --check --remote "$url" \
  --cache-dir /tmp/no-cache --no-progress
for run in 1 2 3; do
  echo "=== serving process $run: empty cache directory, JITKERN_REMOTE_CACHE=$url"
  rm -rf /tmp/serving-cache
  JITKERN_REMOTE_CACHE=$url JITKERN_LOCK_DIGEST=$digest TRITON_CACHE_DIR=/tmp/serving-cache \
    python3 benchmarks/device/h200_cache_check.py "${manifests[@]}"
done
/tmp/redis-root/usr/bin/redis-cli -p 6399 info memory | grep -E '^used_memory_human|^used_memory_peak_human'
/tmp/redis-root/usr/bin/redis-cli -p 6399 shutdown nosave || true
