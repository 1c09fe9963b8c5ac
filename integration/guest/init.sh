#!/bin/busybox sh
# /init of the wisp test guest (integration/guest/prepare-guest packs it). Reports on ttyS0 with
# WISP-* lines the test parses; never exits (the test powers the VM off).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
exec >/dev/ttyS0 2>&1 </dev/null
tag=$(sed -n 's/.*wisp\.tag=\([^ ]*\).*/\1/p' /proc/cmdline)
dir=$(sed -n 's/.*wisp\.dir=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "WISP-BOOTED $(cut -d' ' -f1 /proc/uptime)"
while read -r m; do
  insmod "/lib/modules/$m" || echo "WISP-INSMOD-FAILED $m"
done </lib/modules/order
mkdir -p "$dir"
if ! out=$(mount -t virtiofs -o ro "$tag" "$dir" 2>&1); then
  echo "WISP-MOUNT-FAILED $out"
  while :; do sleep 10; done
fi
echo "WISP-MOUNTED $tag $dir $(cut -d' ' -f1 /proc/uptime)"
last=""
lasterr=""
while :; do
  ok=""
  if tok=$(cat "$dir/token" 2>/tmp/err); then
    ok=1
  elif grep -q "No such file or directory" /tmp/err; then
    # kubelet's AtomicWriter removes the old timestamped directory right after it swaps `..data`:
    # a read that walked the old link finds it gone. Re-read once, as guest software should
    # (docs/operations.md, "Virtual machines"); the test counts these.
    usleep 20000
    if tok=$(cat "$dir/token" 2>/tmp/err); then
      ok=1
      echo "WISP-RETRIED ENOENT"
    fi
  fi
  if [ -n "$ok" ]; then
    sum=$(printf %s "$tok" | sha256sum | cut -d' ' -f1)
    if [ "$sum" != "$last" ]; then
      echo "WISP-READ $sum ${#tok}"
      echo "WISP-CLAIMS $(printf %s "$tok" | cut -d. -f2)"
      last=$sum
      lasterr=""
    fi
  else
    err=$(cat /tmp/err)
    if [ "$err" != "$lasterr" ]; then
      echo "WISP-ERR $err"
      lasterr=$err
    fi
  fi
  usleep 50000
done
