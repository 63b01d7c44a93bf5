// gpupool dashboard: reads the REST API every 2 s and draws the cluster, its cards and who
// holds them, the queues and their shares over time, pending jobs with their reasons and the
// recent events. Plain JavaScript, no build step, nothing fetched from elsewhere.
"use strict";

(() => {
  const POLL_MS = 2000;
  const TOKEN_KEY = "gpupool.token";
  const API = "api/v1";  // relative: the page also works under a path prefix
  const NS_HUES = [212, 28, 140, 350, 265, 185, 48, 320, 95, 10];
  // Queue colours stay clear of the first namespace hues (blue, orange, green) on the cards.
  const QUEUE_COLORS = ["#6d28d9", "#0e7490", "#be123c", "#475569", "#c026d3", "#a16207",
    "#0f766e", "#9f1239", "#4338ca", "#78716c"];
  const HIDDEN = "(another tenant)";
  const EGPU = "elasticgpu/";  // ElasticGPUs hold cards as task elasticgpu/<name>

  const $ = (id) => document.getElementById(id);
  const state = {
    token: null, who: null, cluster: null, nodes: [], queues: [], localQueues: [],
    history: [], pending: [], events: [], chartMode: "share", nsOrder: [], timer: null,
    classes: [], claims: [], egpus: [], prov: [], cloud: null,
    pinned: null, okAt: 0, failures: 0,
  };

  // -- formatting ------------------------------------------------------------------------

  function esc(value) {
    return String(value ?? "").replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function num(x, digits = 2) {
    if (x === null || x === undefined || Number.isNaN(x)) return "–";
    return Number(x.toFixed(digits)).toString();
  }

  function gpus(milli) { return num(milli / 1000, 2); }

  function mib(m) {
    if (m === null || m === undefined) return "–";
    if (m >= 1048576) return `${num(m / 1048576, 1)} TiB`;
    if (m >= 1024) return `${num(m / 1024, 1)} GiB`;
    return `${Math.round(m)} MiB`;
  }

  function dur(s) {
    if (s === null || s === undefined) return "–";
    s = Math.max(0, Math.round(s));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
    if (s < 86400) {
      return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
    }
    return `${Math.floor(s / 86400)}d ${Math.floor(s / 3600) % 24}h`;
  }

  function clock(s) {
    s = Math.max(0, Math.floor(s));
    const d = Math.floor(s / 86400);
    const hms = [Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60, s % 60]
      .map((v) => String(v).padStart(2, "0")).join(":");
    return d ? `day ${d}, ${hms}` : hms;
  }

  function hash(text) {
    let h = 2166136261;
    for (let i = 0; i < text.length; i++) {
      h ^= text.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    return h >>> 0;
  }

  function nsHue(ns) {
    const i = state.nsOrder.indexOf(ns);
    return NS_HUES[(i >= 0 ? i : hash(ns)) % NS_HUES.length];
  }

  function nsColor(ns) {
    if (!ns) return "#9aa3b5";
    return `hsl(${nsHue(ns)} 62% 50%)`;
  }

  // One hue per namespace; jobs of a namespace differ in lightness so neighbours stand apart.
  function jobColor(job, ns) {
    if (!ns || job === HIDDEN) return "#a3aab8";
    const h = hash(job);
    const light = 44 + (h % 5) * 5;
    const sat = 58 + ((h >> 3) % 3) * 9;
    return `hsl(${nsHue(ns)} ${sat}% ${light}%)`;
  }

  function queueColor(name) {
    const i = state.queues.findIndex((q) => q.metadata.name === name);
    return QUEUE_COLORS[(i >= 0 ? i : hash(name)) % QUEUE_COLORS.length];
  }

  function quantityMiB(q) {
    if (q === null || q === undefined) return null;
    if (typeof q === "number") return q;
    const m = String(q).trim().match(/^([0-9.]+)\s*([KMGTP]i?)?$/);
    if (!m) return null;
    const v = parseFloat(m[1]);
    const unit = { Ki: 1 / 1024, Mi: 1, Gi: 1024, Ti: 1048576, K: 1e3 / 1048576,
      M: 1e6 / 1048576, G: 1e9 / 1048576, T: 1e12 / 1048576 }[m[2] || "Mi"];
    return unit ? v * unit : null;
  }

  function asks(spec) {
    return (spec.podSets || []).map((ps) => {
      const g = ps.gpu || {};
      let what;
      if (g.mig) what = `MIG ${g.mig}`;
      else if (g.count) what = `${g.count} GPU`;
      else if (g.milli) {
        const m = quantityMiB(g.memory);
        what = `${num(g.milli / 1000, 3)} GPU` + (m ? ` · ${mib(m)}` : "");
      } else what = `${ps.cpu ?? "?"} CPU`;
      const models = g.models && g.models.length ? ` ${g.models.join("|")}` : "";
      return (ps.count > 1 ? `${ps.count} × ` : "") + what + models;
    }).join(" + ");
  }

  // -- the API -------------------------------------------------------------------------

  class AuthError extends Error {}

  async function api(path) {
    const res = await fetch(API + path, {
      headers: { Authorization: `Bearer ${state.token}`, Accept: "application/json" },
      cache: "no-store",
    });
    if (res.status === 401) {
      let message = "the token was refused";
      try { message = (await res.json()).message || message; } catch (_) { /* keep */ }
      throw new AuthError(message);
    }
    if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
    return res.json();
  }

  // -- token ---------------------------------------------------------------------------

  function tokenFromUrl() {
    const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
    if (!m) return null;
    const t = decodeURIComponent(m[1]);
    history.replaceState(null, "", location.pathname + location.search);
    return t;
  }

  function askForToken(message) {
    clearTimeout(state.timer);
    state.token = null;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("token-input").value = "";
    $("token-input").focus();
  }

  async function signIn(token) {
    state.token = token;
    try {
      state.who = await api("/whoami");
    } catch (err) {
      if (err instanceof AuthError) {
        localStorage.removeItem(TOKEN_KEY);
        askForToken(`That token was refused: ${err.message}.`);
        return;
      }
      // The server may be starting: keep the token and let the poll loop retry.
    }
    localStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    $("signout").hidden = false;
    renderWho();
    poll();
  }

  // -- polling -------------------------------------------------------------------------

  async function poll() {
    clearTimeout(state.timer);
    if (!state.token) return;
    try {
      const [cluster, nodes, queues, lqs, hist, pending, events, classes, claims, egpus,
        prov, cloud] = await Promise.all([
        api("/cluster"), api("/nodes"), api("/clusterqueues"), api("/localqueues"),
        api("/cluster/history"), api("/jobs?phase=Pending&limit=300"),
        api("/events?limit=60"), api("/elasticgpuclasses"), api("/elasticgpuclaims"),
        api("/elasticgpus"), api("/provisioningrequests"),
        api("/cloud").catch((err) => { if (err instanceof AuthError) throw err; return null; }),
      ]);
      if (!state.who) state.who = await api("/whoami");
      state.cluster = cluster;
      state.nodes = nodes.items;
      state.queues = queues.items;
      state.localQueues = lqs.items;
      state.history = hist.samples;
      state.pending = pending.items;
      state.pendingMore = pending.remainingItemCount || 0;
      state.events = events.items;
      state.classes = classes.items;
      state.claims = claims.items;
      state.egpus = egpus.items;
      state.prov = prov.items;
      state.cloud = cloud;
      state.okAt = Date.now();
      state.failures = 0;
      render();
      setLive(true);
    } catch (err) {
      if (err instanceof AuthError) {
        localStorage.removeItem(TOKEN_KEY);
        askForToken(`The server refused the token: ${err.message}.`);
        return;
      }
      state.failures += 1;
      setLive(false, err);
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  function setLive(ok, err) {
    const live = $("live");
    live.classList.toggle("ok", ok);
    live.classList.toggle("err", !ok);
    if (ok) {
      $("live-text").textContent = `live · every ${POLL_MS / 1000} s`;
      live.title = `last update ${new Date(state.okAt).toLocaleTimeString()}`;
    } else {
      $("live-text").textContent = "connection lost · retrying";
      live.title = String(err && err.message ? err.message : err);
    }
  }

  // -- rendering -----------------------------------------------------------------------

  function render() {
    const spaces = new Set();
    for (const lq of state.localQueues) spaces.add(lq.metadata.namespace);
    for (const n of state.nodes) {
      for (const g of n.gpus) for (const h of g.holders) if (h.namespace) spaces.add(h.namespace);
    }
    const known = [...spaces].sort();
    // Keep colours stable: a namespace keeps its place once it has one.
    for (const ns of known) if (!state.nsOrder.includes(ns)) state.nsOrder.push(ns);
    renderHeader();
    renderSummary();
    renderNodes();
    renderQueues();
    renderChart();
    renderPending();
    renderEvents();
    renderElastic();
    renderProvisioning();
    refreshTip();
  }

  function renderWho() {
    const w = state.who;
    if (!w) { $("who").textContent = ""; return; }
    const scope = w.role === "admin" ? "admin" : `tenant: ${(w.namespaces || []).join(", ")}`;
    $("who").innerHTML = `<b>${esc(w.name)}</b> (${esc(scope)})`;
  }

  function renderHeader() {
    const c = state.cluster;
    $("server").textContent = `${location.host} · ${c.nodes.total} nodes, ${c.gpus.total} GPUs`;
    $("clock").textContent = clock(c.timeSeconds);
    const sp = c.speed;
    $("speed").textContent = `×${num(sp, 2)}`;
    $("speed-box").title = sp === 1 ? "cluster time runs at wall-clock speed"
      : `1 wall second = ${dur(sp)} of cluster time`;
    const lc = c.lastCycle;
    $("cycle").textContent = lc ? `${num(lc.decisionMs, 1)} ms` : "none yet";
    $("cycle").parentElement.title = lc ? `cycle ${c.cycles} at ${clock(lc.timeSeconds)}: ` +
      `${lc.bound} bound, ${lc.finished} finished, ${lc.evicted} evicted, ${lc.parked} parked, ` +
      `decided in ${num(lc.decisionMs, 2)} ms` : "no scheduling cycle yet";
    renderWho();
  }

  function renderSummary() {
    const c = state.cluster;
    $("gpu-alloc").textContent = num(c.gpus.allocated, 1);
    $("gpu-total").textContent = c.gpus.total;
    $("gpu-pct").textContent = `${num(c.gpus.allocatedPct, 1)}%`;
    $("gpu-meter").style.width = `${Math.min(100, c.gpus.allocatedPct)}%`;
    $("flavor-use").innerHTML = [...flavorUse().entries()].filter(([, f]) => f.gpus > 0)
      .map(([name, f]) => `<span title="flavor ${esc(name)}: ${f.nodes} nodes, ` +
        `${gpus(f.milli)} of ${f.gpus} GPUs in use">${esc(name)} ` +
        `<b>${gpus(f.milli)}</b>/${f.gpus}</span>`).join("");

    const fr = c.fragmentation;
    $("frag").textContent = `${num(100 * fr.ratio, 1)}%`;
    $("frag-sub").textContent =
      `${gpus(fr.fragmentedGpuMilli)} of ${gpus(fr.freeGpuMilli)} free GPUs stranded`;
    $("tile-frag").title = `fragmentation: ${fr.rule}`;

    const j = c.jobs;
    $("job-counts").innerHTML = [["Pending", "pending"], ["Running", "running"],
      ["Succeeded", "done"], ["Failed", "failed"], ["Cancelled", "cancelled"]].map(([k, cls]) =>
      `<div class="${cls}" data-phase="${k}"><b>${j[k] ?? 0}</b><span>${k.toLowerCase()}` +
      "</span></div>").join("");

    const n = c.nodes;
    $("node-count").textContent = n.total;
    const parts = [`${n.ready} ready`];
    if (n.cordoned) parts.push(`${n.cordoned} cordoned`);
    if (n.failed) parts.push(`${n.failed} failed`);
    if (c.gpus.migPartitioned) parts.push(`${c.gpus.migPartitioned} MIG cards`);
    $("node-sub").textContent = parts.join(" · ");

    const cpuPct = 100 * c.cpuMilli.used / Math.max(1, c.cpuMilli.total);
    const memPct = 100 * c.memoryMib.used / Math.max(1, c.memoryMib.total);
    $("cpu-mem").innerHTML =
      `<div>CPU <b>${num(c.cpuMilli.used / 1000, 1)}</b> / ${num(c.cpuMilli.total / 1000, 0)}` +
      ` cores<div class="meter small"><i style="width:${cpuPct}%"></i></div></div>` +
      `<div>memory <b>${mib(c.memoryMib.used)}</b> / ${mib(c.memoryMib.total)}` +
      `<div class="meter small"><i style="width:${memPct}%"></i></div></div>`;
  }

  // -- nodes and cards --

  // GPU compute held per card, MIG instances counted at their profile's share of the card.
  function cardMilli(card) {
    if (!card.mig || !card.mig.length) return card.usedMilli;
    let milli = 0;
    for (const h of card.holders) {
      const m = card.mig.find((x) => x.profile === h.migProfile);
      milli += m ? m.gpuMilli : h.gpuMilli || 0;
    }
    return milli;
  }

  // Per flavor: nodes, usable cards and compute in use, from the cards as drawn.
  function flavorUse() {
    const out = new Map();
    for (const n of state.nodes) {
      const f = n.flavor || "(no flavor)";
      if (!out.has(f)) out.set(f, { nodes: 0, gpus: 0, milli: 0 });
      const u = out.get(f);
      u.nodes += 1;
      if (n.state === "failed") continue;
      for (const g of n.gpus) {
        if (!g.healthy) continue;
        u.gpus += 1;
        u.milli += cardMilli(g);
      }
    }
    return out;
  }

  function migSlots(card) {
    // Every MIG instance the card can hold, in order: held ones first (one per holder).
    const slots = [];
    const held = card.holders.filter((h) => h.migProfile);
    const byProfile = {};
    for (const h of held) (byProfile[h.migProfile] = byProfile[h.migProfile] || []).push(h);
    for (const m of card.mig) {
      const hs = byProfile[m.profile] || [];
      for (let i = 0; i < m.count; i++) {
        slots.push({ profile: m.profile, milli: m.gpuMilli, mib: m.memoryMib,
          holder: hs[i] || null });
      }
    }
    return slots;
  }

  function elasticOf(h) {
    // An ElasticGPU's holder: its name and its claim ("" while it is bound to none).
    if (!h.job || !h.job.startsWith(EGPU)) return null;
    const owner = h.job.slice(EGPU.length);
    return { gpu: (h.task || "").slice(EGPU.length), claim: owner === "static" ? "" : owner };
  }

  function segAttrs(h, node, card) {
    const e = elasticOf(h);
    return `data-job="${esc(h.job)}" data-ns="${esc(h.namespace)}" ` +
      `data-node="${esc(node.name)}" data-index="${card.index}" data-task="${esc(h.task)}"` +
      (e ? ` data-egpu="${esc(e.gpu)}" data-claim="${esc(e.claim)}"` : "");
  }

  function segClass(h) { return elasticOf(h) ? " egpu" : ""; }

  function cardHtml(node, card) {
    const vendor = card.vendor && card.vendor !== "nvidia" ? `${card.vendor} ` : "";
    const label = `${node.name} GPU ${card.index} (${vendor}${card.model})`;
    let bars;
    let used;
    const cls = ["card"];
    if (card.vendor) cls.push(`vendor-${card.vendor}`);
    if (!card.healthy) cls.push("unhealthy");
    if (card.mig && card.mig.length) {
      cls.push("mig");
      const slots = migSlots(card);
      const cells = slots.map((s) => s.holder
        ? `<i class="slot seg${segClass(s.holder)}" ${segAttrs(s.holder, node, card)} data-mig="${esc(s.profile)}" ` +
          `style="background:${jobColor(s.holder.job, s.holder.namespace)}"></i>`
        : `<i class="slot" data-free="${esc(s.profile)}"></i>`).join("");
      bars = `<div class="bar">${cells}</div><div class="bar mem">${cells}</div>`;
      const busy = slots.filter((s) => s.holder).length;
      used = `<span>MIG</span><b>${busy}/${slots.length}</b>`;
    } else {
      const cap = card.memoryMib || 1;
      const compute = card.holders.map((h) =>
        `<i class="seg${segClass(h)}" ${segAttrs(h, node, card)} ` +
        `style="width:${h.gpuMilli / 10}%;` +
        `background:${jobColor(h.job, h.namespace)}"></i>`).join("");
      const memory = card.holders.map((h) =>
        `<i class="seg${segClass(h)}" ${segAttrs(h, node, card)} ` +
        `style="width:${100 * h.memoryMib / cap}%;` +
        `background:${jobColor(h.job, h.namespace)}"></i>`).join("");
      bars = `<div class="bar">${compute}</div><div class="bar mem">${memory}</div>`;
      const pct = Math.round(card.usedMilli / 10);
      used = card.healthy ? `<span>${card.index}</span><b>${pct ? pct + "%" : ""}</b>`
        : `<span>${card.index}</span><b>down</b>`;
    }
    const pinned = state.pinned && state.pinned.node === node.name &&
      state.pinned.index === card.index ? " pinned" : "";
    return `<div class="${cls.join(" ")}${pinned}" data-node="${esc(node.name)}" ` +
      `data-index="${card.index}" aria-label="${esc(label)}" role="button" tabindex="-1">` +
      `${bars}<div class="cap">${used}</div></div>`;
  }

  function nodeHtml(node) {
    const models = {};
    for (const g of node.gpus) {
      const m = g.vendor && g.vendor !== "nvidia" ? `${g.model} (${g.vendor})` : g.model;
      models[m] = (models[m] || 0) + 1;
    }
    const desc = Object.entries(models).map(([m, k]) => `${k}×${m}`).join(" ");
    const cpu = node.cpuMilli;
    const mem = node.memoryMib;
    const badge = node.state !== "ready" ? `<span class="badge ${esc(node.state)}">` +
      `${esc(node.state)}</span>` : "";
    const title = `${node.name}: ${node.state}; CPU ${num(cpu.used / 1000, 1)}/` +
      `${num(cpu.total / 1000, 0)} cores, memory ${mib(mem.used)}/${mib(mem.total)}`;
    const cards = node.gpus.length ? node.gpus.map((g) => cardHtml(node, g)).join("")
      : `<div class="nogpu">no GPUs · CPU ${num(cpu.used / 1000, 1)}/` +
        `${num(cpu.total / 1000, 0)} cores · memory ${mib(mem.used)}/${mib(mem.total)}</div>`;
    return `<div class="node ${esc(node.state)}" data-node="${esc(node.name)}">` +
      `<div class="node-label" title="${esc(title)}">` +
      `<div class="node-name">${esc(node.name)}</div>` +
      `<div class="node-meta">${badge || esc(desc || "CPU only")}</div>` +
      `<div class="minibars"><div class="minibar" title="CPU"><i style="width:` +
      `${100 * cpu.used / Math.max(1, cpu.total)}%"></i></div><div class="minibar" ` +
      `title="memory"><i style="width:${100 * mem.used / Math.max(1, mem.total)}%"></i>` +
      "</div></div></div>" +
      `<div class="cards">${cards}</div></div>`;
  }

  function renderNodes() {
    const groups = new Map();
    for (const n of state.nodes) {
      const f = n.flavor || "(no flavor)";
      if (!groups.has(f)) groups.set(f, []);
      groups.get(f).push(n);
    }
    const usage = flavorUse();
    const html = [];
    for (const [flavor, nodes] of groups) {
      const fu = usage.get(flavor);
      const use = fu && fu.gpus ? `${gpus(fu.milli)} / ${fu.gpus} GPUs in use` : "";
      html.push(`<div class="flavor-group" data-flavor="${esc(flavor)}">` +
        `<div class="flavor-head"><span>flavor <b>${esc(flavor)}</b></span>` +
        `<span>${nodes.length} node${nodes.length === 1 ? "" : "s"}</span>` +
        `<span class="fu">${use}</span></div>` +
        nodes.map(nodeHtml).join("") + "</div>");
    }
    $("nodes").innerHTML = html.join("");
    $("ns-legend").innerHTML = state.nsOrder.map((ns) =>
      `<span><i style="background:${nsColor(ns)}"></i>${esc(ns)}</span>`).join("") +
      `<span><i style="background:var(--free)"></i>free</span>`;
  }

  // -- queues --

  function queueRows(q) {
    const st = q.status || {};
    const usage = st.usage || {};
    const nominal = st.nominal || {};
    const flavors = [...new Set([...Object.keys(nominal), ...Object.keys(usage)])];
    const rows = [];
    for (const f of flavors) {
      const nom = (nominal[f] || {}).gpuMilli || 0;
      const use = (usage[f] || {}).gpuMilli || 0;
      if (!nom && !use) continue;
      rows.push({ flavor: f, nominal: nom, usage: use });
    }
    return rows;
  }

  function renderQueues() {
    const html = state.queues.map((q) => {
      const name = q.metadata.name;
      const st = q.status || {};
      const spec = q.spec || {};
      const cohort = spec.cohort || spec.cohortName || "";
      const lqs = state.localQueues.filter((lq) => lq.spec && lq.spec.clusterQueue === name)
        .map((lq) => `${lq.metadata.namespace}/${lq.metadata.name}`);
      const rows = queueRows(q);
      const scale = Math.max(1, ...rows.map((r) => Math.max(r.nominal, r.usage)));
      const bars = rows.map((r) => {
        const inQuota = Math.min(r.usage, r.nominal);
        const over = Math.max(0, r.usage - r.nominal);
        const color = queueColor(name);
        const nomMark = r.nominal ? `<i class="nominal" style="left:${100 * r.nominal / scale}%"` +
          ` title="nominal ${gpus(r.nominal)} GPUs"></i>` : "";
        return `<div class="qflavor" data-flavor="${esc(r.flavor)}">` +
          `<span class="fname">${esc(r.flavor)}</span>` +
          `<div class="qbar" title="${esc(r.flavor)}: ${gpus(r.usage)} GPUs used, nominal ` +
          `${gpus(r.nominal)}${over ? `, ${gpus(over)} borrowed` : ""}">` +
          `<i class="use" style="width:${100 * inQuota / scale}%;background:${color}"></i>` +
          (over ? `<i class="borrow" style="left:${100 * inQuota / scale}%;width:` +
            `${100 * over / scale}%;background-color:${color};opacity:.6"></i>` : "") +
          `${nomMark}</div>` +
          `<span class="fnum${over ? " over" : ""}">${gpus(r.usage)} / ${gpus(r.nominal)}` +
          `${over ? ` (+${gpus(over)})` : ""}</span></div>`;
      }).join("");
      const meta = [cohort ? `cohort ${cohort}` : "", lqs.length ? `from ${lqs.join(", ")}` : ""]
        .filter(Boolean).join(" · ");
      return `<div class="queue" data-queue="${esc(name)}">` +
        `<div class="qline"><span class="qname"><i style="background:${queueColor(name)}">` +
        `</i>${esc(name)}</span><span class="qmeta" title="${esc(meta)}">${esc(meta)}</span>` +
        `<span class="qshare" title="${esc(`weighted share: usage over an entitlement of ` +
          `${num(st.entitledGpus ?? 0, 1)} GPUs; 1.0 is exactly its entitlement. ` +
          (st.shareBasis ?? ""))}">` +
        `share <b>${num(st.share ?? 0, 2)}</b> of ${num(st.entitledGpus ?? 0, 1)}</span></div>` +
        `<div class="qjobs"><span class="r">${st.runningJobs ?? 0}</span> running · ` +
        `<span class="p">${st.pendingJobs ?? 0}</span> pending</div>` +
        (bars || `<div class="qflavor"><span class="fname">–</span><span class="hint">` +
          "no GPU quota</span></div>") + "</div>";
    }).join("");
    $("queues").innerHTML = html || `<div class="empty">No cluster queues.</div>`;
  }

  function renderChart() {
    const samples = state.history || [];
    const mode = state.chartMode;
    const names = state.queues.map((q) => q.metadata.name);
    for (const s of samples) {
      for (const k of Object.keys(s.queues || {})) if (!names.includes(k)) names.push(k);
    }
    const W = 360;
    const H = 178;
    const pad = { l: 30, r: 74, t: 8, b: 18 };
    const value = (s, name) => {
      const q = (s.queues || {})[name];
      if (!q) return null;
      return mode === "share" ? q.share : q.gpuMilli / 1000;
    };
    $("chart-title").textContent = mode === "share" ? "Shares over time"
      : "GPUs in use over time";
    $("chart-note").textContent = mode === "share"
      ? "weighted dominant share per queue; the dashed line (1.0) is each queue's fair share"
      : "GPUs of compute each queue holds (whole cards and slices)";
    if (samples.length < 2) {
      $("chart").innerHTML = `<svg viewBox="0 0 ${W} ${H}"><text x="${W / 2}" y="${H / 2}" ` +
        `text-anchor="middle">collecting samples…</text></svg>`;
      return;
    }
    const t0 = samples[0].timeSeconds;
    const t1 = samples[samples.length - 1].timeSeconds;
    let vmax = mode === "share" ? 1.2 : 1;
    for (const s of samples) for (const n of names) vmax = Math.max(vmax, value(s, n) || 0);
    vmax = niceCeil(vmax);
    const x = (t) => pad.l + (W - pad.l - pad.r) * (t - t0) / Math.max(1e-9, t1 - t0);
    const y = (v) => pad.t + (H - pad.t - pad.b) * (1 - v / vmax);
    const parts = [];
    const ticks = 4;
    for (let i = 0; i <= ticks; i++) {
      const v = vmax * i / ticks;
      parts.push(`<line class="gridline" x1="${pad.l}" x2="${W - pad.r}" y1="${y(v)}" ` +
        `y2="${y(v)}"/><text x="${pad.l - 4}" y="${y(v) + 3}" text-anchor="end">` +
        `${num(v, 2)}</text>`);
    }
    parts.push(`<line class="axis" x1="${pad.l}" x2="${W - pad.r}" y1="${y(0)}" y2="${y(0)}"/>`);
    if (mode === "share" && vmax >= 1) {
      parts.push(`<line class="ref" x1="${pad.l}" x2="${W - pad.r}" y1="${y(1)}" y2="${y(1)}"/>`);
    }
    parts.push(`<text x="${pad.l}" y="${H - 4}">${esc(clock(t0))}</text>`);
    parts.push(`<text x="${W - pad.r}" y="${H - 4}" text-anchor="end">${esc(clock(t1))}</text>`);
    const ends = [];
    for (const n of names) {
      let d = "";
      let last = null;
      for (const s of samples) {
        const v = value(s, n);
        if (v === null || v === undefined) continue;
        d += `${d ? "L" : "M"}${x(s.timeSeconds).toFixed(1)},${y(v).toFixed(1)}`;
        last = v;
      }
      if (!d) continue;
      parts.push(`<path class="line" data-queue="${esc(n)}" d="${d}" ` +
        `stroke="${queueColor(n)}"><title>${esc(n)}</title></path>`);
      if (last !== null) ends.push({ n, v: last, y: y(last) });
    }
    // End labels, nudged apart so they do not overlap.
    ends.sort((a, b) => a.y - b.y);
    for (let i = 1; i < ends.length; i++) ends[i].y = Math.max(ends[i].y, ends[i - 1].y + 11);
    for (const e of ends) {
      parts.push(`<text class="lbl" x="${W - pad.r + 4}" y="${e.y + 3}" ` +
        `fill="${queueColor(e.n)}" style="fill:${queueColor(e.n)}">${esc(e.n)} ${num(e.v, 2)}` +
        "</text>");
    }
    $("chart").innerHTML = `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="` +
      `${mode === "share" ? "queue shares" : "GPUs per queue"} over time">${parts.join("")}</svg>`;
  }

  function niceCeil(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // -- pending jobs --

  function renderPending() {
    const items = [...state.pending].sort((a, b) => {
      const pa = a.status.queuePosition;
      const pb = b.status.queuePosition;
      if (pa === null || pa === undefined) return 1;
      if (pb === null || pb === undefined) return -1;
      return pa - pb;
    });
    const speed = state.cluster ? state.cluster.speed : 1;
    // every pending job the token can see, not only the page of them fetched
    const total = items.length + (state.pendingMore || 0);
    $("pending-count").textContent = total > items.length
      ? `(${total.toLocaleString("en-US")}; the first ${items.length} shown)`
      : `(${items.length})`;
    $("pending-count").dataset.total = String(total);
    $("pending-empty").hidden = items.length > 0;
    $("pending").innerHTML = items.map((j) => {
      const st = j.status;
      const ns = j.metadata.namespace;
      const key = `${ns}/${j.metadata.name}`;
      const pos = st.queuePosition === null || st.queuePosition === undefined ? "–"
        : st.queuePosition + 1;
      const prio = j.spec.priorityClassName ? `<span class="prio">` +
        `${esc(j.spec.priorityClassName)}</span>` : "";
      let eta = `<span class="hint">no estimate</span>`;
      if (st.estimatedStartInSeconds !== null && st.estimatedStartInSeconds !== undefined) {
        const wall = speed > 1 ? ` <span class="wall">(≈${dur(st.estimatedStartInSeconds / speed)} ` +
          "wall)</span>" : "";
        eta = st.estimatedStartInSeconds <= 0 ? "<b>next cycle</b>"
          : `<b>in ${dur(st.estimatedStartInSeconds)}</b>${wall}`;
      }
      const queue = `${j.spec.queue}` + (st.clusterQueue && st.clusterQueue !== j.spec.queue
        ? ` → ${st.clusterQueue}` : "");
      return `<tr class="job" data-job="${esc(key)}"><td class="pos" title="position in the ` +
        `admission order">${pos}</td><td class="jobname" title="${esc(key)}">` +
        `<span class="ns">${esc(ns)}/</span>${esc(j.metadata.name)}${prio}</td>` +
        `<td>${esc(queue)}</td><td class="asks" title="${esc(asks(j.spec))}">` +
        `${esc(asks(j.spec))}</td><td>${dur(st.waitSeconds)}</td>` +
        `<td class="eta" title="${st.estimatedStartTimeSeconds !== null && st.estimatedStartTimeSeconds !== undefined
          ? "at cluster time " + esc(clock(st.estimatedStartTimeSeconds)) : ""}">${eta}</td></tr>` +
        `<tr class="why" data-job="${esc(key)}"><td></td><td colspan="5">` +
        `<span class="reason">${esc(st.pendingReason || "")}</span></td></tr>`;
    }).join("");
  }

  // -- events --

  function renderEvents() {
    const items = [...state.events].sort((a, b) => b.seq - a.seq);
    $("events").innerHTML = items.map((e) => {
      const cls = e.type === "Warning" ? `Warning ${e.reason}` : e.reason;
      return `<li data-seq="${e.seq}"><span class="t" title="cluster time">` +
        `${esc(clock(e.timeSeconds))}</span><span class="r ${esc(cls)}">${esc(e.reason)}</span>` +
        `<span class="m" title="${esc(e.object)}: ${esc(e.message)}"><b>${esc(e.object)}</b> ` +
        `${esc(e.message)}</span></li>`;
    }).join("") || `<li class="empty">No events yet.</li>`;
  }

  // -- Elastic GPUs --

  function claimAsks(r) {
    let what;
    if (r.cards) what = `${r.cards} card${r.cards > 1 ? "s" : ""}` +
      (r.memoryMib ? ` of ≥ ${mib(r.memoryMib)}` : "");
    else if (r.tflops) what = `${num(r.tflops, 1)} TFLOPS` +
      (r.memoryMib ? ` + ${mib(r.memoryMib)}` : "");
    else what = [r.gpuMilli ? `${r.gpuMilli} milli` : "", r.memoryMib ? mib(r.memoryMib) : ""]
      .filter(Boolean).join(" · ");
    return what + (r.models && r.models.length ? ` (${r.models.join(", ")})` : "");
  }

  function where(g) {
    if (g.source === "remote") return `pool ${g.pool} #${g.card}`;
    return `${g.node} GPU ${g.card}` + (g.migProfile ? ` ${g.migProfile}` : "");
  }

  function renderProvisioning() {
    const cloud = state.cloud;
    if (cloud) {
      const zones = cloud.pools.flatMap((p) => p.zones.map((z) =>
        `${p.name}/${z.name} ${z.nodes} node${z.nodes === 1 ? "" : "s"}` +
        (z.stockedOut ? " (stocked out)" : "")));
      $("cloud-line").textContent = `cloud ${cloud.name}: ${cloud.gpusHeld} / ` +
        `${cloud.gpuQuota} GPUs of quota held · ${zones.join(" · ")}`;
    }
    const reqs = [...(state.prov || [])].sort((a, b) =>
      a.status.createTimeSeconds - b.status.createTimeSeconds);
    $("prov-empty").hidden = reqs.length > 0;
    $("prov").innerHTML = reqs.map((r) => {
      const s = r.status;
      const key = `${r.metadata.namespace}/${r.metadata.name}`;
      const count = r.spec.podSets.reduce((n, p) => n + p.count, 0);
      let when = `asked ${clock(s.createTimeSeconds)}`;
      if (s.bookingExpiryTimeSeconds !== null) when = `booked until ${clock(s.bookingExpiryTimeSeconds)}`;
      else if (s.consumeTimeSeconds !== null) {
        when = s.runEndTimeSeconds !== null ? `reclaimed at ${clock(s.runEndTimeSeconds)}`
          : `in use since ${clock(s.consumeTimeSeconds)}`;
      }
      const last = s.conditions.filter((c) => c.status === "True").pop();
      const tip = last ? `${last.reason}: ${last.message}` : "waiting for the cloud";
      return `<tr class="prov" data-request="${esc(key)}" data-phase="${esc(s.phase)}">` +
        `<td class="name" title="${esc(key)}"><span class="ns">${esc(r.metadata.namespace)}/` +
        `</span>${esc(r.metadata.name)}</td><td>${esc(r.job || "–")}</td>` +
        `<td title="${esc(s.nodes.join(", "))}">${s.nodes.length || count}</td>` +
        `<td title="${esc(tip)}"><span class="phase ${esc(s.phase)}">${esc(s.phase)}</span>` +
        `</td><td>${esc(when)}</td></tr>`;
    }).join("");
  }

  function renderElastic() {
    const byName = {};
    for (const g of state.egpus) byName[g.name] = g;
    const phase = (p) => `<span class="phase ${esc(p)}">${esc(p)}</span>`;
    const claims = [...state.claims].sort((a, b) =>
      `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
    $("claims-count").textContent = `(${claims.length})`;
    $("claims-empty").hidden = claims.length > 0;
    $("claims").innerHTML = claims.map((c) => {
      const key = `${c.namespace}/${c.name}`;
      const held = c.elasticGPUs.map((n) => {
        const g = byName[n];
        return g ? `${esc(n)} <span class="muted">(${esc(where(g))})</span>` : esc(n);
      }).join(", ");
      const serving = c.servingModels && c.servingModels.length
        ? ` · on ${c.servingModels.map((m) => m.model).join(", ")}` : "";
      const row = `<tr class="claim" data-claim="${esc(key)}" data-phase="${esc(c.phase)}">` +
        `<td class="name" title="${esc(key)}"><span class="ns">${esc(c.namespace)}/</span>` +
        `${esc(c.name)}</td><td>${esc(c.className)}</td>` +
        `<td title="${esc(claimAsks(c.requests) + serving)}">${esc(claimAsks(c.requests))}` +
        `</td><td>${phase(c.phase)}</td><td class="holds" title="${esc(c.elasticGPUs.join(
          ", "))}">${held || "–"}</td></tr>`;
      return row + (c.message ? `<tr class="msg" data-claim="${esc(key)}"><td></td>` +
        `<td colspan="4">${esc(c.message)}</td></tr>` : "");
    }).join("");

    $("egpus-count").textContent = `(${state.egpus.length})`;
    $("egpus-empty").hidden = state.egpus.length > 0;
    $("egpus").innerHTML = state.egpus.map((g) => {
      const cap = g.capacity;
      const capText = `${cap.gpuMilli} milli · ${mib(cap.memoryMib)}` +
        (cap.tflops ? ` · ${num(cap.tflops, 1)} TFLOPS` : "");
      const ref = g.claimRef ? `${g.claimRef.namespace}/${g.claimRef.name}` : "–";
      return `<tr class="egpu" data-egpu="${esc(g.name)}" data-phase="${esc(g.phase)}">` +
        `<td class="name" title="${esc(g.name)}">${esc(g.name)}</td>` +
        `<td>${esc(g.source)}</td><td class="where" title="${esc(g.model)}">` +
        `${esc(where(g))}</td><td>${esc(capText)}</td><td>${phase(g.phase)}</td>` +
        `<td class="ref">${esc(ref)}</td></tr>`;
    }).join("");

    $("classes-count").textContent = `(${state.classes.length})`;
    $("classes-empty").hidden = state.classes.length > 0;
    $("classes").innerHTML = state.classes.map((c) => {
      const params = Object.entries(c.parameters).map(([k, v]) => `${k}=${v}`).join(" ");
      return `<tr class="class" data-class="${esc(c.name)}"><td class="name">` +
        `${esc(c.name)}</td><td>${esc(c.provisioner)}</td><td title="${esc(params)}">` +
        `${esc(params || "–")}</td><td>${esc(c.reclaimPolicy)}</td>` +
        `<td>${esc(c.bindingMode)}</td></tr>`;
    }).join("");
  }

  // -- hover and click details -------------------------------------------------------------

  function findCard(nodeName, index) {
    const node = state.nodes.find((n) => n.name === nodeName);
    if (!node) return null;
    const card = node.gpus.find((g) => g.index === index);
    return card ? { node, card } : null;
  }

  function holderLine(h, card) {
    const mig = card.mig.find((m) => m.profile === h.migProfile);
    const milli = h.migProfile && mig ? mig.gpuMilli : h.gpuMilli;
    const memory = h.migProfile && mig ? mig.memoryMib : h.memoryMib;
    const what = h.migProfile ? `MIG ${h.migProfile} (${milli} milli, ${mib(memory)})`
      : `${milli} milli · ${mib(memory)}`;
    const e = elasticOf(h);
    const who = e ? `ElasticGPU ${e.gpu}` + (e.claim ? ` · claim ${e.claim}` : " · unbound")
      : h.job;
    return `<div><i style="background:${jobColor(h.job, h.namespace)}"></i>` +
      `<span>${esc(who)}</span><span class="muted">${esc(what)}</span></div>`;
  }

  function tipHtml(target) {
    const found = findCard(target.node, target.index);
    if (!found) return null;
    const { node, card } = found;
    const kind = card.vendor ? ` · ${esc(card.vendor)}, ${esc(card.division)} division` +
      (card.relative_capacity !== 1 ? `, capacity ${num(card.relative_capacity, 2)}` : "") : "";
    const head = `<h4>${esc(node.name)} · GPU ${card.index} · ${esc(card.model)}${kind}</h4>`;
    const close = target.pinned ? `<button class="close" type="button" aria-label="close">` +
      "×</button>" : "";
    if (target.task) {
      const h = card.holders.find((x) => x.task === target.task && x.job === target.job) ||
        card.holders.find((x) => x.job === target.job);
      if (!h) return null;
      const mig = card.mig.find((m) => m.profile === h.migProfile);
      const milli = h.migProfile && mig ? mig.gpuMilli : h.gpuMilli;
      const memory = h.migProfile && mig ? mig.memoryMib : h.memoryMib;
      const whole = !h.migProfile && h.gpuMilli >= 1000;
      const kind = h.migProfile ? `MIG instance ${h.migProfile}`
        : whole ? "the whole card" : "a slice of the card";
      let extra = "";
      const e = elasticOf(h);
      if (e) {
        const c = target.pinned && target.detail ? target.detail : null;
        return close + head + `<dl><dt>ElasticGPU</dt><dd>${esc(e.gpu)}</dd>` +
          `<dt>claim</dt><dd>${esc(e.claim || "none (Available)")}</dd>` +
          `<dt>namespace</dt><dd>${esc(h.namespace || "–")}</dd>` +
          `<dt>holds</dt><dd>${esc(kind)}</dd>` +
          `<dt>compute</dt><dd>${milli} milli (${num(milli / 10, 1)}%)</dd>` +
          `<dt>memory</dt><dd>${memory} MiB (${mib(memory)} of ${mib(card.memoryMib)})</dd>` +
          (c ? `<dt>phase</dt><dd>${esc(c.phase)}</dd><dt>class</dt>` +
            `<dd>${esc(c.className)}</dd><dt>asks</dt><dd>${esc(claimAsks(c.requests))}</dd>`
            : "") + "</dl>" +
          (target.pinned || !e.claim ? "" : `<div class="foot">click to pin and see the ` +
            "claim</div>");
      }
      if (target.pinned && target.detail) {
        const s = target.detail.status;
        extra = `<dt>phase</dt><dd>${esc(s.phase)}</dd>` +
          `<dt>queue</dt><dd>${esc(target.detail.spec.queue)} → ${esc(s.clusterQueue)}` +
          ` (${esc(s.flavor)})</dd>` +
          `<dt>asks</dt><dd>${esc(asks(target.detail.spec))}</dd>` +
          (s.startTimeSeconds !== null ? `<dt>started</dt><dd>${esc(clock(s.startTimeSeconds))}, after ` +
            `${dur(s.waitSeconds)} waiting</dd>` : "") +
          (s.expectedEndTimeSeconds ? `<dt>ends</dt><dd>${esc(clock(s.expectedEndTimeSeconds))}</dd>` : "");
      }
      return close + head + `<dl><dt>job</dt><dd>${esc(h.job)}</dd>` +
        `<dt>namespace</dt><dd>${esc(h.namespace || "–")}</dd>` +
        `<dt>task</dt><dd>${esc(h.task || "–")}</dd>` +
        `<dt>holds</dt><dd>${esc(kind)}</dd>` +
        `<dt>compute</dt><dd>${milli} milli (${num(milli / 10, 1)}%)</dd>` +
        `<dt>memory</dt><dd>${memory} MiB (${mib(memory)} of ${mib(card.memoryMib)})</dd>` +
        extra + "</dl>" +
        (target.pinned ? "" : `<div class="foot">click to pin and see the job</div>`);
    }
    const free = card.mig.length
      ? card.mig.map((m) => `${m.free}/${m.count} × ${m.profile} free`).join(", ")
      : `${1000 - card.usedMilli} milli and ${mib(card.memoryMib - card.usedMib)}`;
    const holders = card.holders.length
      ? `<div class="holders">${card.holders.map((h) => holderLine(h, card)).join("")}</div>`
      : `<div class="foot">no holder: the card is free</div>`;
    return close + head + `<dl><dt>uuid</dt><dd>${esc(card.uuid)}</dd>` +
      `<dt>state</dt><dd>${card.healthy ? "healthy" : "unhealthy"}${node.state !== "ready"
        ? `, node ${esc(node.state)}` : ""}</dd>` +
      `<dt>used</dt><dd>${card.usedMilli} milli · ${card.usedMib} MiB of ` +
      `${card.memoryMib} MiB</dd><dt>free</dt><dd>${esc(free)}</dd>` +
      (card.nvlinkPeers.length ? `<dt>NVLink</dt><dd>GPU ${card.nvlinkPeers.join(", ")}</dd>`
        : "") + measuredLine(card.measured) + "</dl>" + holders;
  }

  // Placement by measured use: what the card is measured to do, beside what is requested.
  function measuredLine(m) {
    if (!m) return "";
    if (!m.fresh) return "<dt>measured</dt><dd>no fresh sample: placed by requests</dd>";
    const util = m.utilPct == null ? "" : `, p90 ${num(m.utilPct, 1)}% busy`;
    const fb = m.usedMib == null ? "" : ` · FB ${m.usedMib} MiB used` +
      (m.freeMib == null ? "" : `, ${m.freeMib} MiB free`);
    const age = m.ageSeconds == null ? "" : ` · ${num(m.ageSeconds, 0)} s old`;
    return `<dt>measured</dt><dd>${num(m.loadMilli / 10, 1)}% load${util}${fb}${age}</dd>`;
  }

  let hovered = null;

  function targetOf(el) {
    const seg = el.closest(".seg");
    const card = el.closest(".card");
    if (!card) return null;
    const t = { node: card.dataset.node, index: Number(card.dataset.index) };
    if (seg) {
      t.job = seg.dataset.job;
      t.task = seg.dataset.task;
    }
    return t;
  }

  function placeTip(x, y) {
    const tip = $("tip");
    const r = tip.getBoundingClientRect();
    let left = x + 14;
    let top = y + 14;
    if (left + r.width > window.innerWidth - 8) left = x - r.width - 14;
    if (top + r.height > window.innerHeight - 8) top = Math.max(8, y - r.height - 14);
    tip.style.left = `${Math.max(8, left)}px`;
    tip.style.top = `${top}px`;
  }

  function showTip(target, x, y) {
    const html = tipHtml(target);
    const tip = $("tip");
    if (!html) { tip.hidden = true; return; }
    tip.innerHTML = html;
    tip.classList.toggle("pinned", Boolean(target.pinned));
    tip.hidden = false;
    if (x !== undefined) placeTip(x, y);
  }

  function highlight(job) {
    document.querySelectorAll(".seg.hi").forEach((e) => e.classList.remove("hi"));
    if (!job || job === HIDDEN) return;
    document.querySelectorAll(".seg").forEach((e) => {
      if (e.dataset.job === job) e.classList.add("hi");
    });
  }

  function refreshTip() {
    const t = state.pinned || hovered;
    if (!t) return;
    if (!findCard(t.node, t.index)) {
      state.pinned = null;
      $("tip").hidden = true;
      return;
    }
    showTip(t);
    highlight(t.job);
  }

  function wireCards() {
    const nodes = $("nodes");
    nodes.addEventListener("mousemove", (ev) => {
      if (state.pinned) return;
      const t = targetOf(ev.target);
      if (!t) {
        if (hovered) { hovered = null; $("tip").hidden = true; highlight(null); }
        return;
      }
      const same = hovered && hovered.node === t.node && hovered.index === t.index &&
        hovered.task === t.task;
      hovered = t;
      if (!same) { showTip(t, ev.clientX, ev.clientY); highlight(t.job); }
      else placeTip(ev.clientX, ev.clientY);
    });
    nodes.addEventListener("mouseleave", () => {
      if (state.pinned) return;
      hovered = null;
      $("tip").hidden = true;
      highlight(null);
    });
    nodes.addEventListener("click", async (ev) => {
      const t = targetOf(ev.target);
      if (!t) return;
      ev.stopPropagation();
      t.pinned = true;
      state.pinned = t;
      document.querySelectorAll(".card.pinned").forEach((e) => e.classList.remove("pinned"));
      const cardEl = ev.target.closest(".card");
      if (cardEl) cardEl.classList.add("pinned");
      showTip(t, ev.clientX, ev.clientY);
      highlight(t.job);
      const claim = t.job && t.job.startsWith(EGPU) ? t.job.slice(EGPU.length) : null;
      if (claim && claim !== "static") {
        const [ns, ...rest] = claim.split("/");
        try {
          t.detail = await api(`/elasticgpuclaims/${encodeURIComponent(ns)}/` +
            `${encodeURIComponent(rest.join("/"))}`);
          if (state.pinned === t) { showTip(t); placeTip(ev.clientX, ev.clientY); }
        } catch (_) { /* the claim may be gone meanwhile */ }
      } else if (t.job && t.job !== HIDDEN && !claim) {
        const [ns, ...rest] = t.job.split("/");
        try {
          t.detail = await api(`/jobs/${encodeURIComponent(ns)}/` +
            `${encodeURIComponent(rest.join("/"))}`);
          if (state.pinned === t) { showTip(t); placeTip(ev.clientX, ev.clientY); }
        } catch (_) { /* the job may have ended meanwhile */ }
      }
    });
    document.addEventListener("click", (ev) => {
      if (!state.pinned) return;
      const tip = $("tip");
      if (tip.contains(ev.target) && !ev.target.closest(".close")) return;
      state.pinned = null;
      tip.hidden = true;
      highlight(null);
      document.querySelectorAll(".card.pinned").forEach((e) => e.classList.remove("pinned"));
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape" && state.pinned) {
        state.pinned = null;
        hovered = null;
        document.querySelectorAll(".card.pinned").forEach((e) => e.classList.remove("pinned"));
        $("tip").hidden = true;
        highlight(null);
      }
    });
  }

  // -- start -----------------------------------------------------------------------------

  function start() {
    wireCards();
    document.querySelectorAll(".toggle button").forEach((b) => b.addEventListener("click", () => {
      state.chartMode = b.dataset.mode;
      document.querySelectorAll(".toggle button").forEach((x) =>
        x.classList.toggle("on", x === b));
      if (state.cluster) renderChart();
    }));
    $("login-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const t = $("token-input").value.trim();
      if (!t) { $("login-error").textContent = "Paste a token first."; return; }
      signIn(t);
    });
    $("signout").addEventListener("click", () => {
      localStorage.removeItem(TOKEN_KEY);
      state.who = null;
      askForToken("");
    });
    const token = tokenFromUrl() || localStorage.getItem(TOKEN_KEY);
    if (token) signIn(token);
    else askForToken("");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
