-- wrk script: POST the AdmissionReview in $BODY_FILE at a steady $RATE requests/s in total, spread
-- over wrk's threads ($WRK_THREADS of them). wrk has no constant-rate mode (wrk2 is not packaged),
-- so each thread keeps an absolute schedule of send slots (one every THREADS/RATE seconds) and
-- delay() holds a connection that is ready early until its slot. The slots are absolute, so a
-- rounding or a late slot does not lower the rate; if the server falls behind, connections send as
-- soon as they are free and the achieved rate in RESULT drops below the target (that is the check).
-- Latency is wrk's: from sending a request to its full answer.
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } wisp_timespec;
  int clock_gettime(int clk_id, wisp_timespec *tp);
]]
local ts = ffi.new("wisp_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

local interval_ms = 1000 * tonumber(os.getenv("WRK_THREADS") or "1") / tonumber(os.getenv("RATE"))
local next_slot = nil

delay = function()
  local now = now_ms()
  if next_slot == nil then next_slot = now end
  local wait = next_slot - now
  next_slot = next_slot + interval_ms
  if wait < 0 then return 0 end
  return math.floor(wait + 0.5)
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
