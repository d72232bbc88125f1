// Overview: queries per second (the growth of the query log's rollup totals between two polls),
// blocked share and the per-minute series of the last hour, cache hit rate per core, upstream
// health and latency, top names, blocked names and clients; from the data plane's counters
// (GET /api/v1/stats/live, rates between two polls by its monotonic `time`): queries per
// second by transport and by core, answers per second by source (cache, upstream, local,
// blocked, other), answer latency p50/p90/p99 overall, by transport and by core, upstream
// latency p50/p90/p99. Polls every 5 s.
import { h, get, can, table, say, errorText } from "../app.js";

const POLL_MS = 5000;
const SVG = "http://www.w3.org/2000/svg";

function card(id, label) {
  return h("div", { class: "card" }, h("span", { class: "v", id }, "—"), h("span", { class: "k" }, label));
}

function spark(series) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 600 60");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const max = Math.max(1, ...series.map((s) => s.queries));
  svg.setAttribute("aria-label", `queries per minute over the last hour, peak ${max}`);
  const step = series.length > 1 ? 600 / (series.length - 1) : 600;
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", series.map((s, i) => `${(i * step).toFixed(1)},${(58 - (s.queries / max) * 56).toFixed(1)}`).join(" "));
  svg.append(line);
  return svg;
}

const rate = (now, before, dt) => Math.max(0, now - before) / dt;
const fmtRate = (r) => r.toFixed(r < 10 ? 1 : 0);
const ms = (v) => (v == null ? "—" : `${Number(v).toFixed(v < 10 ? 2 : 1)} ms`);

const SOURCES = ["cache", "upstream", "local", "blocked", "other"];

// Answer latency since start (receipt to the send path), overall and by transport: counts and
// percentiles, shown from the first poll.
function answerLatencyTable(answer) {
  const row = (label, p) => [label, String((p && p.count) || 0), ms(p && p.p50Ms), ms(p && p.p90Ms), ms(p && p.p99Ms)];
  const by = answer.byTransport || {};
  return h("div", { id: "answer-latency" },
    table("Answer latency since start (receipt to send)", ["transport", "answers", "p50", "p90", "p99"],
      [row("all", answer), ...Object.keys(by).map((t) => row(t, by[t]))]));
}

// The data plane's rates between two polls of /stats/live: by transport, by core, latency.
function liveParts(now, before, set) {
  const lat = now.upstreamLatency || {};
  const answer = now.answerLatency || {};
  set("live-p50", ms(lat.p50Ms));
  set("live-p99", ms(lat.p99Ms));
  set("answer-p50", ms(answer.p50Ms));
  set("answer-p99", ms(answer.p99Ms));
  const src = now.total.answersBySource || {};
  const dt = before ? now.time - before.time : 0;
  if (!(dt > 0)) {
    set("live-qps", "…");
    return [h("p", { class: "k", id: "live-wait" }, "Rates by transport and by core show from the second poll."),
      h("div", { class: "cards" }, answerLatencyTable(answer),
        h("div", { id: "answers-by-source" },
          table("Answers by source since start", ["source", "total"], SOURCES.map((k) => [k, String(src[k] ?? 0)]))))];
  }
  set("live-qps", fmtRate(rate(now.total.queries, before.total.queries, dt)));
  const transports = Object.keys(now.total.queriesByTransport || {});
  const byTransport = transports.map((t) => [t, fmtRate(rate(now.total.queriesByTransport[t], before.total.queriesByTransport[t] || 0, dt)),
    String(now.total.queriesByTransport[t])]);
  const byCore = (now.perCore || []).map((c, i) => {
    const b = (before.perCore || [])[i] || c;
    const hitRate = c.cacheHitRate == null ? "—" : `${(100 * c.cacheHitRate).toFixed(1)} %`;
    const a = c.answerLatency || {};
    return [String(i), fmtRate(rate(c.queries, b.queries, dt)), fmtRate(rate(c.dropped, b.dropped, dt)), hitRate,
      ms(a.p50Ms), ms(a.p99Ms)];
  });
  const bsrc = before.total.answersBySource || {};
  const perSec = (k) => (src[k] == null ? "not counted" : fmtRate(rate(src[k], bsrc[k] || 0, dt)));
  return [
    h("div", { class: "cards", id: "live" },
      table("Queries per second by transport", ["transport", "per second", "total"], byTransport),
      table("Queries per second by core", ["core", "queries/s", "dropped/s", "cache hit rate", "answer p50", "answer p99"], byCore),
      answerLatencyTable(answer),
      h("div", { id: "answers-by-source" },
        table("Answers by source", ["source", "per second", "total"], SOURCES.map((k) => [k, perSec(k), String(src[k] ?? 0)]))),
      table("Upstream latency", ["percentile", "latency"], [["p50", ms(lat.p50Ms)], ["p90", ms(lat.p90Ms)], ["p99", ms(lat.p99Ms)]])),
  ];
}

export async function render(main) {
  // The rate is the growth of the totals since `from` between two polls; `from` stays put so
  // the totals only grow, and moves on every hour (one poll then shows no rate) so the answer
  // stays small.
  let fromMs = Date.now() - 3600e3;
  const cards = h("div", { class: "cards" },
    card("qps", "queries per second"), card("queries", "queries in the last hour"),
    card("blocked", "blocked share"), card("hitrate", "cache hit rate"),
    card("upstreams", "upstreams healthy"), card("live-qps", "queries per second (all cores)"),
    card("live-p50", "upstream latency p50"), card("live-p99", "upstream latency p99"),
    card("answer-p50", "answer latency p50"), card("answer-p99", "answer latency p99"));
  const live = h("div", { "aria-live": "off" });
  main.append(h("p", { class: "k" }, "Updates every 5 s."), cards, live);
  let last = null;
  let lastLive = null;
  let timer = null;
  let stopped = false;

  async function poll() {
    const now = performance.now();
    const jobs = [get("/cache"), get("/upstreams"), get("/stats/live")];
    if (Date.now() - fromMs > 2 * 3600e3) { fromMs = Date.now() - 3600e3; last = null; }
    if (can("querylog.read")) jobs.push(get(`/stats?from=${encodeURIComponent(new Date(fromMs).toISOString())}&top=5`));
    let cache, ups, liveStats, stats;
    try {
      [cache, ups, liveStats, stats] = await Promise.all(jobs);
    } catch (e) {
      if (!stopped) say(errorText(e), "error");
      return;
    }
    if (stopped) return;
    const parts = [];
    const set = (id, text) => { const el = document.getElementById(id); if (el) el.textContent = text; };
    if (stats) {
      const t = stats.totals;
      const open = stats.series[stats.series.length - 1];
      const inMinute = open ? (Date.now() - open.startUnixNs / 1e6) / 1000 : 0;
      if (last) {
        const rate = Math.max(0, t.queries - last.queries) / ((now - last.at) / 1000);
        set("qps", rate.toFixed(rate < 10 ? 1 : 0));
      } else if (open && inMinute >= 5) {
        // The first poll: the current minute's mean so far.
        const rate = open.queries / inMinute;
        set("qps", rate.toFixed(rate < 10 ? 1 : 0));
      }
      last = { queries: t.queries, at: now };
      const recent = stats.series.slice(-60);
      const hour = recent.reduce((a, s) => a + s.queries, 0);
      const hourBlocked = recent.reduce((a, s) => a + s.blocked, 0);
      set("queries", String(hour));
      set("blocked", hour ? `${((100 * hourBlocked) / hour).toFixed(1)} %` : "—");
      parts.push(h("h2", {}, "Queries per minute"), spark(recent));
      const top = (title, rows, key) => table(title, [key, "queries"], rows.map((r) => [h("span", { class: "mono" }, r[key]), String(r.count)]));
      parts.push(h("div", { class: "cards" },
        top("Top names", stats.topNames, "name"), top("Top blocked", stats.topBlocked, "name"),
        top("Top clients", stats.topClients, "client")));
    } else {
      set("qps", "—");
      parts.push(h("p", {}, "Query rates and top lists come from the query log, which needs the operator role."));
    }
    parts.push(...liveParts(liveStats, lastLive, set));
    lastLive = liveStats;
    const cores = cache.cores || [];
    const hits = cores.reduce((a, c) => a + (c.hits || 0), 0);
    const misses = cores.reduce((a, c) => a + (c.misses || 0), 0);
    set("hitrate", hits + misses ? `${((100 * hits) / (hits + misses)).toFixed(1)} %` : "—");
    const upstreams = ups.upstreams || [];
    set("upstreams", `${upstreams.filter((u) => u.healthy).length} / ${upstreams.length}`);
    parts.push(table("Upstreams", ["upstream", "health", "queries", "errors", "mean latency"],
      upstreams.map((u) => [h("span", { class: "mono" }, u.upstream),
        h("span", { class: "pill " + (u.healthy ? "ok" : "fail") }, u.healthy ? "healthy" : "failing"),
        String(u.queries), String(u.errors), `${Number(u.meanLatencyMs).toFixed(1)} ms`])));
    parts.push(table("Cache by core", ["core", "entries", "capacity", "hits", "misses", "hit rate"],
      cores.map((c) => c.error ? [String(c.core), c.error, "", "", "", ""] : [String(c.core), String(c.entries), String(c.capacity),
        String(c.hits), String(c.misses), c.hits + c.misses ? `${((100 * c.hits) / (c.hits + c.misses)).toFixed(1)} %` : "—"])));
    live.replaceChildren(...parts);
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  }

  async function loop() {
    await poll();
    if (!stopped) timer = setTimeout(loop, POLL_MS);
  }
  await loop();
  return () => { stopped = true; clearTimeout(timer); };
}
