// The page of `vram serve`: what `vram status` shows, kept live through server-sent events
// (/api/v1/events: the whole status JSON first, then what changed after each reading), or by
// polling /api/v1/snapshot where events are unavailable or failing, and history charts from
// /api/v1/history. Read-only: it only ever GETs.
//
// Built for a big server (8 GPUs x 200 processes): each GPU shows its first ROWS processes in
// the chosen order and a button with the count of the rest; sorting and the user filter are the
// page's own, applied to the data it holds.
//
// Every text that comes from the server (host, GPU and user names, process names, errors) is
// set with textContent, never parsed as HTML: user names on a shared machine are chosen by
// others. Nothing here writes a style attribute into markup (the server's CSP forbids inline
// styles); a bar's width is set through the CSSOM (element.style), which CSP allows.
//
// Every word the page shows goes through t() (or tn() for a count), in the language the server
// chose for the reader (Accept-Language, else its own: serve/page_words.py), whose translations
// came with the page as a JSON block (#words); a word without one is shown in English.
"use strict";

(function () {
  const POLL_MS = 3000; // how often to ask for a snapshot while the event stream is down
  const STREAM_RETRY_MS = 10000; // a closed event stream (refused, not merely dropped) is retried after this
  const STALE_FLOOR_MS = 10000; // no new reading for max(this, 3 reading intervals): say so
  const HISTORY_REFRESH_MS = { "5m": 10000, "1h": 30000, "24h": 300000, "7d": 900000 };
  const TICK_PX = 10, AXIS_GAP_PX = 5, AXIS_FONT_PX = 12; // uPlot's axis defaults (ticks, gap, 12px font)
  const GIB = 1024 * 1024 * 1024;
  const MIB = 1024 * 1024;
  const ROWS = 5; // processes shown per GPU until its "show all" is pressed
  const CLOCKS = ["elapsed", "idle_for"]; // per process: seconds that run on between readings (serve/updates.py)
  const TOP_CLOCKS = ["watched_for"];
  const SORTS = {
    memory: (a, b) => (b.memory || 0) - (a.memory || 0),
    sm: (a, b) => (known(b.sm_utilization) ? b.sm_utilization : -1) - (known(a.sm_utilization) ? a.sm_utilization : -1),
    cpu: (a, b) => (known(b.cpu_percent) ? b.cpu_percent : -1) - (known(a.cpu_percent) ? a.cpu_percent : -1),
    user: (a, b) => userOf(a).localeCompare(userOf(b), LANG),
    age: (a, b) => (b.elapsed || 0) - (a.elapsed || 0),
    pid: (a, b) => a.pid - b.pid,
  };
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];

  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------ the page's words
  const LANG = document.documentElement.lang || "en";
  function readBlock(id) {
    const block = $(id);
    try {
      const data = block ? JSON.parse(block.textContent) : null;
      return data && typeof data === "object" ? data : {};
    } catch (e) {
      return {}; // English, as the page holds it
    }
  }
  const WORDS = (() => {
    const data = readBlock("words");
    // The N/A reasons and GPU errors of the reading the page came with (the driver layers store them in English).
    return { words: { ...(data.words || {}), ...readBlock("reasons") }, plurals: data.plurals || {} };
  })();
  const own = (table, key) => Object.prototype.hasOwnProperty.call(table, key);

  // {name} placeholders filled from values (as Python's str.format names them).
  function withValues(text, values) {
    if (!values) return text;
    return text.replace(/\{(\w+)\}/g, (whole, name) => (own(values, name) ? String(values[name]) : whole));
  }

  // A word or sentence of the page, by its English (serve/page_words.py lists each one).
  const t = (english, values) => withValues(own(WORDS.words, english) ? WORDS.words[english] : english, values);

  // One with a count n (also its {n}): the singular or the plural, as the language has them.
  function tn(singular, plural, n, values) {
    const forms = own(WORDS.plurals, singular) ? WORDS.plurals[singular] : [singular, plural];
    return withValues(forms[n === 1 ? 0 : 1], { n: n, ...values });
  }

  // ------------------------------------------------------------ formatting
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  const known = (v) => v !== null && v !== undefined;

  // A node's text and class set only when they change: setting the same text again still
  // replaces its text node, and the browser lays the page out again.
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function setClass(node, className) {
    if (node.className !== className) node.className = className;
  }

  // `old` (in the page) made to look as `fresh` (just built, not in the page) by changing only
  // what differs, node by node: an update rewrites the few texts that moved instead of replacing
  // every card, so the browser restyles, lays out and paints only those (replacing the cards of
  // 8 GPUs x 5 rows was ~700 new nodes every reading). Listeners are delegated (on #gpus and
  // #hosts), so no node carries one of its own.
  function morph(old, fresh) {
    if (old.nodeName !== fresh.nodeName) { // (a text node's is "#text")
      old.replaceWith(fresh);
      return;
    }
    if (old.nodeType === Node.TEXT_NODE) {
      if (old.data !== fresh.data) old.data = fresh.data;
      return;
    }
    if (old.nodeType !== Node.ELEMENT_NODE) return;
    if (fresh.attributes.length || old.attributes.length) morphAttributes(old, fresh);
    const children = fresh.childNodes;
    const only = children.length === 1 && old.childNodes.length === 1 ? children[0] : null;
    if (only && only.nodeType === Node.TEXT_NODE && old.firstChild.nodeType === Node.TEXT_NODE) {
      if (old.firstChild.data !== only.data) old.firstChild.data = only.data; // most cells: one text
      return;
    }
    morphChildren(old, Array.from(children));
  }

  function morphAttributes(old, fresh) {
    const now = fresh.attributes;
    let styled = false;
    for (let i = 0; i < now.length; i++) {
      const { name, value } = now[i];
      // style: only its width is ever set, through the CSSOM (CSP refuses a style attribute)
      if (name === "style") styled = true;
      else if (old.getAttribute(name) !== value) old.setAttribute(name, value);
    }
    const was = old.attributes;
    for (let i = was.length - 1; i >= 0; i--) {
      const name = was[i].name;
      if (name === "style") styled = true;
      else if (!fresh.hasAttribute(name)) old.removeAttribute(name);
    }
    if (styled && old.style.width !== fresh.style.width) old.style.width = fresh.style.width;
  }

  // parent's children made to look as the `fresh` nodes (see morph).
  function morphChildren(parent, fresh) {
    const common = Math.min(parent.childNodes.length, fresh.length);
    for (let i = 0; i < common; i++) morph(parent.childNodes[i], fresh[i]);
    while (parent.childNodes.length > fresh.length) parent.lastChild.remove();
    for (let i = common; i < fresh.length; i++) parent.append(fresh[i]);
  }

  // Python's format(x, ".Nf"), which `vram status` prints with: the exact value rounded, a tie to
  // the even digit. toFixed takes a tie up (78.25 GiB is "78.3", 22.5 % is "23"), so a tie is
  // found in the exact decimal expansion (25 digits past the wanted ones tell a tie from a near one).
  function fixed(x, digits) {
    const exact = Math.abs(x).toFixed(digits + 25);
    const cut = exact.length - 25;
    if (!Number.isFinite(x) || exact.slice(cut) !== "5" + "0".repeat(24)) return x.toFixed(digits);
    const head = exact.slice(0, cut).replace(/\.$/, "");
    if (Number(head.slice(-1)) % 2 === 1) return x.toFixed(digits); // up to the even digit
    return (x < 0 ? "-" : "") + head;
  }

  // units.format_size: "12.3 GiB", "512 MiB", "216 GiB" (no decimal from 100 GiB).
  function size(bytes) {
    if (!known(bytes)) return "N/A";
    if (Math.abs(bytes) >= GIB) {
      const gib = bytes / GIB;
      return fixed(gib, Math.abs(gib) < 100 ? 1 : 0) + " GiB";
    }
    return fixed(bytes / MIB, 0) + " MiB";
  }

  // fmt.memory_pair: "70.6 / 80.0 GiB", both in GiB, as `vram status` prints them.
  function usedOfTotal(used, total) {
    if (!known(used) || !known(total)) return size(used) + " / " + size(total);
    return fixed(used / GIB, 1) + " / " + fixed(total / GIB, 1) + " GiB";
  }

  // fmt.pct: "22%" (a share of 22.5 % is 22, as `vram status` rounds it).
  const pct = (value) => (known(value) ? fixed(value, 0) + "%" : "N/A");

  // units.format_duration: 45s, 12m05s, 3h05m, 2d04h.
  function duration(seconds) {
    if (!known(seconds)) return "N/A";
    const s = Math.max(0, Math.floor(seconds));
    const two = (n) => String(n).padStart(2, "0");
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor((s % 3600) / 60)) + "m";
    return Math.floor(s / 86400) + "d" + two(Math.floor((s % 86400) / 3600)) + "h";
  }

  const two = (n) => String(n).padStart(2, "0");

  // 24-hour local time, everywhere on the page (the banner and the charts).
  function clock(unixSeconds, seconds = true) {
    const d = new Date(unixSeconds * 1000);
    return two(d.getHours()) + ":" + two(d.getMinutes()) + (seconds ? ":" + two(d.getSeconds()) : "");
  }

  function day(unixSeconds) {
    const d = new Date(unixSeconds * 1000);
    return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate());
  }

  // A value the driver did not give is N/A, with its reason as a tooltip; never 0.
  const FIELD_NAMES = { temperature: "temperature", power: "power", memory_utilization: "memory busy" };
  function field(gpu, name, text) {
    const node = el("span", "fact " + name, text);
    const reason = gpu.na && gpu.na[name];
    if (reason) node.title = t("{field}: {reason}", { field: own(FIELD_NAMES, name) ? t(FIELD_NAMES[name]) : name, reason: t(reason) });
    return node;
  }

  // ------------------------------------------------------------ the GPUs
  // alarm: whether a full bar is drawn in the alarm colour (memory nearly full is; a busy GPU is
  // what it is for).
  function meter(kind, label, ratio, valueText, alarm) {
    const box = el("div", "meter " + kind);
    box.append(el("span", "meter-label", label));
    const bar = el("div", "bar");
    const fill = el("div", "fill");
    if (known(ratio)) {
      const r = Math.min(1, Math.max(0, ratio));
      fill.style.width = (r * 100).toFixed(1) + "%"; // CSSOM, allowed under style-src 'self'
      if (alarm && r >= 0.9) bar.classList.add("high");
    } else {
      bar.classList.add("na");
    }
    bar.append(fill);
    box.append(bar, valueText);
    return box;
  }

  // ------------------------------------------------------------ the page's own choices
  const view = { sort: "memory", user: "", expanded: new Set() }; // expanded: the GPUs showing every process (showAll's keys)
  const userOf = (p) => (known(p.user) ? String(p.user) : "N/A"); // as the table shows it

  function shownProcesses(processes) {
    const mine = view.user ? processes.filter((p) => userOf(p) === view.user) : processes.slice();
    const order = SORTS[view.sort] || SORTS.memory;
    return mine.sort((a, b) => order(a, b) || a.pid - b.pid);
  }

  // The process table's column headings, in the page's language once (SM and CPU are names).
  const HEADINGS = [t("pid"), t("user"), t("process"), t("memory"), "SM", "CPU", t("age"), ""];

  // scope: "" for this machine's GPUs, "h2-" for those of the third host of --hosts (the key of
  // "show all" and of a card's id).
  function processTable(gpu, watchedFor, scope) {
    const processes = gpu.processes || [];
    const unknown = gpu.na ? gpu.na.processes : null;
    const wrap = el("div", "procs-wrap");
    if (known(unknown)) {
      // The driver would not list them: not "no processes", and no count (status: the same words).
      wrap.append(el("p", "no-procs unknown", t("processes unknown ({reason})", { reason: t(unknown) })));
      return wrap;
    }
    if (!processes.length) {
      wrap.append(el("p", "no-procs", t("no processes")));
      return wrap;
    }
    const listed = shownProcesses(processes);
    if (!listed.length) {
      wrap.append(el("p", "no-procs", t("no processes of {user} ({n} of others)", { user: view.user, n: processes.length })));
      return wrap;
    }
    const all = view.expanded.has(scope + gpu.index);
    const drawn = all ? listed : listed.slice(0, ROWS);
    const table = el("table", "procs");
    const head = el("tr");
    for (const name of HEADINGS) head.append(el("th", null, name));
    const thead = el("thead");
    thead.append(head);
    table.append(thead);
    const body = el("tbody");
    for (const p of drawn) {
      const row = el("tr", "proc");
      row.dataset.pid = String(p.pid);
      row.append(el("td", "pid", known(p.pid) ? p.pid : "-"), el("td", "user", userOf(p)),
        el("td", "pname", known(p.name) ? p.name : ""), el("td", "pmem", size(p.memory)),
        el("td", "psm", pct(p.sm_utilization)), el("td", "pcpu", pct(p.cpu_percent)),
        el("td", "age", duration(p.elapsed)));
      const flags = el("td", "flags");
      if (p.idle) flags.append(idleFlag(p, watchedFor));
      if (p.zombie) flags.append(el("span", "flag zombie", t("zombie")));
      if (p.orphaned) flags.append(el("span", "flag orphan", t("orphan")));
      row.append(flags);
      body.append(row);
    }
    table.append(body);
    wrap.append(table);
    if (listed.length > ROWS) {
      const more = el("button", "more", all ? t("show the first {n}", { n: ROWS })
        : t("+ {more} more (show all {all})", { more: listed.length - ROWS, all: listed.length }));
      more.type = "button";
      more.dataset.gpu = scope + gpu.index;
      more.setAttribute("aria-expanded", String(all));
      wrap.append(more);
    }
    return wrap;
  }

  // How long a holder has been idle, where that is known. One idle since the server's first reading
  // (not seeded from a recorded history) has been idle at least that long, maybe for days: the
  // page says "idle" alone in its first minute ("idle 0s" would be a guess), then "idle ≥ 5m00s".
  function idleFlag(p, watchedFor) {
    const flag = el("span", "flag idle", t("idle"));
    if (!known(p.idle_for)) return flag;
    const sinceWatching = known(watchedFor) && Math.abs(p.idle_for - watchedFor) < 0.001;
    if (!sinceWatching) {
      flag.textContent = t("idle {duration}", { duration: duration(p.idle_for) });
    } else if (p.idle_for >= 60) {
      flag.textContent = t("idle ≥ {duration}", { duration: duration(p.idle_for) });
    }
    if (sinceWatching) flag.title = t("idle since before vram serve started watching it");
    return flag;
  }

  function gpuCard(gpu, watchedFor, scope = "") {
    const card = el("article", "gpu");
    card.dataset.index = String(gpu.index);
    card.id = scope + "gpu-" + gpu.index;
    const head = el("div", "gpu-head");
    head.append(el("span", "gpu-index", gpu.index), el("span", "gpu-name", known(gpu.name) ? gpu.name : "N/A"));
    card.append(head);
    if (gpu.lost) {
      card.classList.add("lost");
      card.append(el("p", "gpu-error", t("GPU lost: it fell off the bus; no reading")));
      return card;
    }
    if (gpu.error) card.append(el("p", "gpu-error", t(gpu.error)));

    const used = gpu.memory_used, total = gpu.memory_total;
    const memValue = el("span", "meter-value");
    memValue.append(el("span", "mem-text", usedOfTotal(used, total)));
    if (known(used) && total) memValue.append(el("span", "pct", pct(100 * (used / total))));
    const util = gpu.utilization;
    const utilValue = el("span", "meter-value util-text", pct(util));
    const meters = el("div", "meters");
    meters.append(meter("memory", t("mem"), known(used) && total ? used / total : null, memValue, true),
      meter("utilization", t("util"), known(util) ? util / 100 : null, utilValue, false));
    card.append(meters);

    const facts = el("div", "facts-row");
    facts.append(field(gpu, "temperature", known(gpu.temperature) ? gpu.temperature + " °C" : "N/A °C"));
    const draw = known(gpu.power_draw) ? fixed(gpu.power_draw, 0) : "N/A";
    const limit = known(gpu.power_limit) ? fixed(gpu.power_limit, 0) : "N/A";
    facts.append(field(gpu, "power", draw + " / " + limit + " W"));
    if (known(gpu.memory_utilization)) {
      facts.append(field(gpu, "memory_utilization", t("mem busy {percent}%", { percent: gpu.memory_utilization })));
    }
    if (gpu.mig_enabled) {
      const instances = (gpu.mig_devices || []).length;
      facts.append(el("span", "fact mig", tn("MIG: {n} instance", "MIG: {n} instances", instances)));
    }
    card.append(facts);
    card.append(processTable(gpu, watchedFor, scope));
    return card;
  }

  // One chip per GPU, a line or two even on a phone: its index, memory and utilization; a tap
  // goes to its card.
  function renderStrip(data) {
    const chips = [];
    for (const g of data.gpus) {
      const chip = el("a", "chip");
      chip.href = "#gpu-" + g.index;
      chip.append(el("span", "chip-index", g.index));
      if (g.lost) {
        chip.classList.add("lost");
        chip.append(el("span", "chip-text", t("lost")));
      } else {
        const share = known(g.memory_used) && g.memory_total ? g.memory_used / g.memory_total : null;
        const bar = el("span", "chip-bar");
        const fill = el("span", "chip-fill");
        if (known(share)) fill.style.width = (Math.min(1, share) * 100).toFixed(0) + "%";
        if (known(share) && share >= 0.9) bar.classList.add("high");
        bar.append(fill);
        chip.append(bar, el("span", "chip-text", (known(share) ? pct(100 * share) : "N/A") + " · " + pct(g.utilization)));
      }
      chip.title = t("GPU {index}: memory {memory}, utilization {utilization}",
        { index: g.index, memory: usedOfTotal(g.memory_used, g.memory_total), utilization: pct(g.utilization) });
      chips.push(chip);
    }
    morphChildren($("strip"), chips);
  }

  // The users holding memory, for the filter: each with how many processes (as they are now).
  function renderUsers(data) {
    const counts = new Map();
    const everyGpu = data.gpus.concat(...(data.hosts || []).map((h) => (h.snapshot ? h.snapshot.gpus : [])));
    for (const g of everyGpu) for (const p of g.processes || []) {
      const user = userOf(p);
      counts.set(user, (counts.get(user) || 0) + 1);
    }
    const names = Array.from(counts.keys()).sort((a, b) => a.localeCompare(b, LANG));
    const key = names.map((n) => n + "\u0000" + counts.get(n)).join("\u0001");
    const select = $("user");
    if (select.dataset.key === key) return; // the same users: leave the control alone
    select.dataset.key = key;
    const options = [el("option", null, t("all users"))];
    options[0].value = "";
    for (const name of names) {
      const option = el("option", null, name + " (" + counts.get(name) + ")");
      option.value = name;
      options.push(option);
    }
    if (view.user && !counts.has(view.user)) {
      const gone = el("option", null, view.user + " (0)"); // still chosen: kept, with none now
      gone.value = view.user;
      options.push(gone);
    }
    select.replaceChildren(...options);
    select.value = view.user;
  }

  function renderGpus(data) {
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.gpu : undefined;
    morphChildren($("gpus"), data.gpus.map((gpu) => gpuCard(gpu, data.watched_for)));
    if (focused !== undefined) { // the "show all" button pressed from the keyboard keeps the focus
      const again = $("gpus").querySelector('button.more[data-gpu="' + focused + '"]');
      if (again) again.focus();
    }
  }

  // A reading drawn at once (the first, and on the reader's choices), or, after an update, its
  // GPUs' cards one task each, then the hosts and the freshness line: no task of an update holds
  // the main thread long (all 8 cards of a big server in one task took 10-20 ms, over 50 ms on a
  // loaded machine), and the browser paints and answers the reader between them. A reading that
  // comes meanwhile starts a new round of every card from the one reached (each card drawn from
  // the newest reading, none left behind). A change in the number of GPUs is drawn at once.
  let drawing = null; // {data, order}: the cards (positions) still to draw after an update

  function render(data, soon) {
    renderBanner(data);
    renderStrip(data);
    renderUsers(data);
    const n = data.gpus.length;
    if (soon && $("gpus").children.length === n) {
      const from = drawing && drawing.order.length ? drawing.order[0] : 0;
      const order = [];
      for (let k = 0; k < n; k++) order.push((from + k) % n);
      const idle = drawing === null;
      drawing = { data: data, order: order };
      if (idle) setTimeout(drawNextCard, 0);
      return;
    }
    drawing = null;
    renderGpus(data);
    renderHosts(data, false);
    renderFreshness();
  }

  function drawNextCard() {
    const job = drawing;
    if (!job) return; // drawn at once meanwhile
    if (job.order.length) {
      const i = job.order.shift();
      morph($("gpus").children[i], gpuCard(job.data.gpus[i], job.data.watched_for));
      setTimeout(drawNextCard, 0);
      return;
    }
    drawing = null;
    renderHosts(job.data, false);
    renderFreshness();
  }

  // ------------------------------------------------------------ the other hosts (vram serve --hosts)
  // Each as serve/hosts.py keeps it: its reading (drawn with the same cards as this machine's), or
  // why it is down. A section is drawn again only when its host changed (hostsChanged), or on a
  // choice of the reader's (sort, filter, "show all").
  const DOWN = { // serve/hosts.py's DOWN, by `why`
    slow: "did not answer within {detail}",
    "too-big": "answered more than {detail}: not read",
    unreachable: "cannot reach it: {detail}",
    protocol: "did not answer in HTTP: {detail}",
    "bad-body": "answered, but its answer cannot be read: {detail}",
    status: "answered HTTP {detail}",
    "not-json": "answered something that is not vram serve's JSON",
  };
  let hostsChanged = null; // null: every host; else the positions of the hosts a delta changed

  function hostSection(entry, i) {
    const section = el("section", "host");
    section.dataset.address = String(entry.address);
    const snap = entry.snapshot;
    // The name the host gives itself (its word: the address typed for it is shown beside it).
    const said = snap && snap.hostname ? snap.hostname : entry.hostname;
    const name = said ? String(said) : String(entry.address);
    const head = el("h2", "host-head");
    head.append(el("span", "host-name", name));
    if (name !== String(entry.address)) head.append(el("span", "host-address", entry.address));
    section.append(head);
    if (entry.why === "waiting") {
      section.append(el("p", "host-state", t("Not read yet.")));
      return section;
    }
    if (!entry.up || !snap || !Array.isArray(snap.gpus)) {
      section.classList.add("down");
      const why = own(DOWN, entry.why) ? t(DOWN[entry.why], { detail: known(entry.detail) ? entry.detail : "" })
        : String(entry.error || "");
      section.append(el("p", "host-state down", known(entry.last_seen)
        ? t("Down: {why}. Last seen at {when}.", { why: why, when: clock(entry.last_seen) })
        : t("Down: {why}. Not seen since this server started.", { why: why })));
      return section;
    }
    if (snap.simulated) head.append(el("span", "simulated", t("SIMULATED")));
    section.append(el("p", "facts", factsOf(snap)));
    const cards = el("div", "host-gpus");
    cards.append(...snap.gpus.map((gpu) => gpuCard(gpu, snap.watched_for, "h" + i + "-")));
    section.append(cards);
    return section;
  }

  function renderHosts(data, all) {
    const hosts = Array.isArray(data.hosts) ? data.hosts : [];
    const box = $("hosts");
    if (box.hidden !== !hosts.length) box.hidden = !hosts.length;
    const changed = all || hostsChanged === null || box.children.length !== hosts.length ? null : hostsChanged;
    hostsChanged = new Set();
    if (changed === null) {
      morphChildren(box, hosts.map(hostSection));
      return;
    }
    for (const i of changed) morph(box.children[i], hostSection(hosts[i], i));
  }

  // ------------------------------------------------------------ the banner
  let hostFromServer = ""; // from /metrics' vram_exporter_info, until the snapshot carries it

  function renderBanner(data) {
    const host = data.hostname || hostFromServer || location.hostname || "vram";
    setText($("host"), host);
    const sim = $("simulated");
    if (sim.hidden !== !data.simulated) sim.hidden = !data.simulated;
    const scenario = data.scenario || "?";
    const title = data.simulated ? t("simulated machine (scenario {scenario}), not real GPUs", { scenario: scenario }) : "";
    if (sim.title !== title) sim.title = title;
    const name = data.simulated ? t("SIMULATED {host} · vram", { host: host }) : host + " · vram";
    if (document.title !== name) document.title = name;

    setText($("facts"), factsOf(data));
  }

  // A machine's line under its name: driver, GPUs and what they hold, as `vram status` says it.
  function factsOf(data) {
    const scenario = data.scenario || "?";
    const gpus = data.gpus || [];
    let used = 0, total = 0;
    const pids = new Set();
    let unknown = 0;
    for (const g of gpus) {
      if (g.lost) continue;
      if (known(g.memory_used) && known(g.memory_total)) { used += g.memory_used; total += g.memory_total; }
      for (const p of g.processes || []) pids.add(known(p.pid) ? p.pid : "host" + p.nvml_pid);
      if (g.na && known(g.na.processes)) unknown += 1;
    }
    const parts = [];
    if (data.simulated) parts.push(t("scenario {scenario}, not real GPUs", { scenario: scenario }));
    parts.push(t("driver {version}", { version: data.driver_version || "N/A" }));
    if (data.cuda_version) parts.push("CUDA " + data.cuda_version);
    parts.push(tn("{n} GPU", "{n} GPUs", gpus.length));
    // `vram status`'s total line: "216 GiB of 320 GiB used by 5 processes (processes unknown on 1 GPU)".
    let held = tn("{used} of {total} used by {n} process", "{used} of {total} used by {n} processes", pids.size,
      { used: size(used), total: size(total) });
    if (unknown) {
      held = tn("{held} (processes unknown on {n} GPU)", "{held} (processes unknown on {n} GPUs)", unknown, { held: held });
    }
    parts.push(held);
    return parts.join(" · ");
  }

  async function readHostname() {
    try {
      const answer = await fetch("/metrics", { cache: "no-store" });
      if (!answer.ok) return;
      const found = (await answer.text()).match(/^vram_exporter_info\{.*?hostname="((?:[^"\\]|\\.)*)"/m);
      if (!found) return;
      hostFromServer = found[1].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      if (latest) renderBanner(latest);
    } catch (e) {
      // the banner keeps the page's host name
    }
  }

  // ------------------------------------------------------------ readings and freshness
  let latest = null; // the newest status JSON
  let receivedAt = 0; // when (client clock, ms) a reading with a new timestamp came
  let readingGapMs = 0; // between the last two readings, by the server's clock
  let failingSince = null; // client ms of the first unanswered request since the last answer
  let mode = "connecting";

  function parse(text) {
    try {
      const data = JSON.parse(text);
      return data && typeof data === "object" ? data : null;
    } catch (e) {
      return null; // a torn message: the next one replaces it
    }
  }

  // A whole reading; hostsText: /api/v1/hosts' answer, for a reading that does not hold the hosts.
  function accept(text, hostsText) {
    const data = parse(text);
    if (data && hostsText) {
      const hosts = parse(hostsText);
      if (hosts && Array.isArray(hosts.hosts)) data.hosts = hosts.hosts;
    }
    hostsChanged = null;
    show(data);
  }

  let shownTimestamp = null; // the server's timestamp of the reading shown (the stream's doc changes in place)

  function show(data) {
    if (!data || !Array.isArray(data.gpus)) return;
    if (data.timestamp !== shownTimestamp) {
      if (known(shownTimestamp) && known(data.timestamp)) {
        readingGapMs = Math.max(0, (data.timestamp - shownTimestamp) * 1000);
      }
      shownTimestamp = data.timestamp;
      receivedAt = Date.now();
    }
    const first = latest === null;
    latest = data;
    if (first && charts.length) loadHistory(); // drawn before the first reading: redraw on the GPUs' memory scale
    render(data, !first);
  }

  // ------------------------------------------------------------ the event stream's deltas
  // What the stream holds: the whole JSON it sent first, with every delta since applied, and
  // the reading (event id) that stands for. A delta from another reading (missed, or a stream
  // that was restarted) cannot be applied: the stream is opened again, and sends the whole JSON.
  let streamDoc = null;
  let streamSeq = null;

  // As serve/updates.py's process_key: a row with no pid here (inside a container) by its host pid.
  function processKey(p) {
    const pid = known(p.pid) ? p.pid : "host" + p.nvml_pid;
    return known(p.mig_gi) ? pid + "/" + p.mig_gi : String(pid);
  }

  function runClocks(record, names, dt) {
    for (const name of names) if (typeof record[name] === "number") record[name] = record[name] + dt;
  }

  // serve/updates.py makes these; the clocks run on here in the same sums as there.
  function applyDelta(doc, delta) {
    applyDocDelta(doc, delta);
    const hosts = delta.hosts || {};
    for (const i of Object.keys(hosts)) {
      const entry = doc.hosts && doc.hosts[Number(i)];
      if (!entry) continue;
      Object.assign(entry, hosts[i].set || {});
      if (hosts[i].doc && entry.snapshot) applyDocDelta(entry.snapshot, hosts[i].doc);
      if (hostsChanged) hostsChanged.add(Number(i));
    }
  }

  // A status JSON's delta (this machine's, or another host's with its own dt).
  function applyDocDelta(doc, delta) {
    const dt = delta.dt || 0;
    runClocks(doc, TOP_CLOCKS, dt);
    Object.assign(doc, delta.set || {});
    const changes = delta.gpus || {};
    doc.gpus.forEach((gpu, i) => {
      for (const p of gpu.processes || []) runClocks(p, CLOCKS, dt);
      const change = changes[String(i)];
      if (!change) return;
      Object.assign(gpu, change.set || {});
      let processes = gpu.processes || [];
      if (change.del) {
        const gone = new Set(change.del);
        processes = processes.filter((p) => !gone.has(processKey(p)));
      }
      if (change.chg) {
        const byKey = new Map(processes.map((p) => [processKey(p), p]));
        for (const name of Object.keys(change.chg)) {
          for (const [key, value] of change.chg[name]) {
            const p = byKey.get(key);
            if (p) p[name] = value;
          }
        }
      }
      if (change.add) processes = processes.concat(change.add);
      gpu.processes = processes;
    });
  }

  function onWhole(event) {
    const data = parse(event.data);
    if (!data || !Array.isArray(data.gpus)) return;
    hostsChanged = null;
    streamDoc = data;
    streamSeq = event.lastEventId;
    show(streamDoc);
  }

  function onDelta(event) {
    const delta = parse(event.data);
    if (!delta) return;
    if (!streamDoc || String(delta.base) !== streamSeq) {
      restartStream(); // a gap: the whole JSON again
      return;
    }
    applyDelta(streamDoc, delta);
    streamSeq = event.lastEventId;
    show(streamDoc);
  }

  function answered() {
    failingSince = null;
  }

  function unanswered() {
    if (failingSince === null) failingSince = Date.now();
    renderFreshness();
  }

  function renderFreshness() {
    const note = $("freshness");
    const when = latest && known(latest.timestamp) ? clock(latest.timestamp) : t("none yet");
    if (failingSince !== null) {
      setClass(note, "freshness down");
      setText(note, t("The server stopped answering at {time}. Last reading: {when}. Retrying…",
        { time: clock(failingSince / 1000), when: when }));
      return;
    }
    if (!latest) {
      setClass(note, "freshness");
      setText(note, t("Connecting…"));
      return;
    }
    const quiet = Date.now() - receivedAt;
    // The server's interval when it says it, else the gap seen between readings (unknown before
    // the second one: then 20 s is assumed, so a slow --interval is not called stale at once).
    const interval = known(latest.interval) ? latest.interval * 1000 : readingGapMs || 20000;
    if (quiet > Math.max(STALE_FLOOR_MS, 3 * interval)) {
      setClass(note, "freshness stale");
      setText(note, t("No new reading for {duration}: the server answers, but its last reading is from {when}.",
        { duration: duration(quiet / 1000), when: when }));
      return;
    }
    setClass(note, "freshness live");
    setText(note, mode === "polling" ? t("Last reading {when} · polling every {seconds} s", { when: when, seconds: POLL_MS / 1000 })
      : t("Last reading {when} · live", { when: when }));
  }

  // The reading the server had when it sent the page (a JSON block in it), else the one it has
  // now: the page shows the GPUs as soon as it runs, not after a round trip to the event stream.
  async function firstReading() {
    const block = $("reading");
    if (block) {
      const hosts = $("hosts-reading");
      accept(block.textContent, hosts ? hosts.textContent : null);
      if (latest) {
        answered();
        return;
      }
    }
    try {
      const answer = await fetch("/api/v1/snapshot", { cache: "no-store" });
      const text = await answer.text();
      answered();
      if (answer.ok) accept(text);
    } catch (e) {
      // the stream (or polling) says how the server answers
    }
  }

  // ------------------------------------------------------------ event stream, and polling when it is down
  let stream = null;
  let polling = false;
  let pollTimer = null;

  function startStream() {
    if (typeof window.EventSource !== "function") {
      startPolling();
      return;
    }
    stream = new EventSource("/api/v1/events");
    stream.addEventListener("open", () => {
      answered();
      stopPolling();
      mode = "live";
      renderFreshness();
    });
    for (const [name, handle] of [["snapshot", onWhole], ["delta", onDelta]]) {
      stream.addEventListener(name, (event) => {
        answered();
        stopPolling();
        mode = "live";
        handle(event);
      });
    }
    stream.addEventListener("error", () => {
      startPolling(); // a dropped stream reconnects by itself; meanwhile snapshots come by polling
      if (stream && stream.readyState === EventSource.CLOSED) {
        stream.close(); // refused (503: too many streams, 401): it will not retry by itself
        stream = null;
        setTimeout(startStream, STREAM_RETRY_MS);
      }
    });
  }

  function restartStream() {
    if (stream) stream.close();
    stream = null;
    streamDoc = streamSeq = null;
    startStream();
  }

  function startPolling() {
    if (polling) return;
    polling = true;
    mode = "polling";
    pollOnce();
  }

  // The other hosts as the server last read them (null: it reads none, or did not answer).
  async function hostsNow() {
    try {
      const answer = await fetch("/api/v1/hosts", { cache: "no-store" });
      return answer.ok ? await answer.text() : null;
    } catch (e) {
      return null;
    }
  }

  function stopPolling() {
    polling = false;
    clearTimeout(pollTimer);
  }

  async function pollOnce() {
    if (!polling) return;
    try {
      const answer = await fetch("/api/v1/snapshot", { cache: "no-store" });
      const text = await answer.text();
      answered();
      if (answer.ok) accept(text, await hostsNow());
      else renderFreshness();
    } catch (e) {
      unanswered();
    }
    if (polling) pollTimer = setTimeout(pollOnce, POLL_MS);
  }

  // ------------------------------------------------------------ history charts
  let range = "1h";
  let charts = [];
  let historyTimer = null;

  function clearCharts() {
    for (const chart of charts) chart.destroy();
    charts = [];
    $("charts").replaceChildren();
  }

  function chartWidth() {
    return Math.max(200, $("charts").clientWidth - 14); // the chart box's padding and border
  }

  function drawHistory(answer) {
    clearCharts();
    const gpus = Object.keys(answer.gpus).sort((a, b) => Number(a) - Number(b));
    const note = $("history-note");
    if (!gpus.length) {
      note.textContent = t("Nothing recorded in the last {range}.", { range: range });
      return;
    }
    if (typeof window.uPlot !== "function") {
      note.textContent = t("No history chart: the chart library did not load.");
      return;
    }
    note.textContent = t("Recorded by vram record: highest memory and utilization per {duration}.", { duration: duration(answer.width) });
    const times = new Set();
    for (const g of gpus) for (const slot of answer.gpus[g]) times.add(slot[0]);
    const xs = Array.from(times).sort((a, b) => a - b);
    const at = new Map(xs.map((t, i) => [t, i]));
    const memory = gpus.map(() => new Array(xs.length).fill(null));
    const util = gpus.map(() => new Array(xs.length).fill(null));
    gpus.forEach((g, n) => {
      for (const [t, used, busy] of answer.gpus[g]) {
        const i = at.get(t);
        memory[n][i] = known(used) ? used / GIB : null;
        util[n][i] = known(busy) ? busy : null;
      }
    });
    const totals = latest ? latest.gpus.map((g) => g.memory_total || 0) : [];
    const top = totals.length ? Math.max(...totals) / GIB : null;
    const ink = getComputedStyle(document.body).color;
    const grid = { stroke: "rgba(128,128,128,0.25)", width: 1 };
    const axis = (unit, size) => ({ stroke: ink, grid: grid, ticks: grid, size: size,
      values: unit ? (u, vals) => vals.map((v) => v + unit) : undefined });
    // The time axis as tall as its labels: a tick at midnight (or a range's first) is two lines,
    // the time over the date, and uPlot cuts what does not fit in the axis' size.
    const timeAxisSize = (u, values) => {
      const lines = Math.max(1, ...(values || []).map((v) => String(v).split("\n").length));
      return TICK_PX + AXIS_GAP_PX + Math.ceil(lines * AXIS_FONT_PX * 1.5) + 2;
    };
    // 24-hour time as in the banner (uPlot's default is "1:59pm"), the date under a day's first tick.
    const timeValues = (u, splits, axisIdx, space, incr) => splits.map((t, i) => {
      const hm = clock(t, incr < 60);
      return i === 0 || day(t) !== day(splits[i - 1]) ? hm + "\n" + day(t) : hm;
    });
    const series = (digits, unit) => gpus.map((g, n) => ({
      label: "GPU " + g, stroke: PALETTE[n % PALETTE.length], width: 1.5,
      value: (u, v) => (known(v) ? v.toFixed(digits) + unit : "–"),
    }));
    const make = (title, yRange, unit, digits, data, tick) => {
      const box = el("div", "chart");
      $("charts").append(box);
      const opts = {
        title: title, width: chartWidth(), height: 200,
        scales: { x: { time: true }, y: { range: yRange } },
        series: [{ label: t("time"), value: (u, v) => (known(v) ? day(v) + " " + clock(v) : "–") }, ...series(digits, unit)],
        axes: [{ ...axis(null, timeAxisSize), values: timeValues }, axis(tick, 64)],
      };
      charts.push(new window.uPlot(opts, [xs, ...data], box));
    };
    make(t("Memory used per GPU (GiB)"), top ? [0, top] : (u, lo, hi) => [0, Math.max(1, hi)], " GiB", 1, memory, " GiB");
    make(t("Utilization per GPU (%)"), [0, 100], "%", 0, util, "%");
  }

  async function loadHistory() {
    clearTimeout(historyTimer);
    const note = $("history-note");
    const asked = range;
    try {
      const answer = await fetch("/api/v1/history?range=" + encodeURIComponent(asked), { cache: "no-store" });
      let body = null;
      try {
        body = await answer.json();
      } catch (e) {
        body = null;
      }
      if (asked !== range) return; // another range was chosen meanwhile
      if (answer.status === 200 && body && body.gpus) {
        drawHistory(body);
      } else {
        clearCharts();
        // The server's reason is the API's English: shown in the page's language where the page has it.
        const why = body && typeof body.error === "string" ? t(body.error) : t("the server answered HTTP {status}", { status: answer.status });
        note.textContent = t("No history chart: {why}.", { why: why });
      }
    } catch (e) {
      if (asked !== range) return;
      note.textContent = t("No history chart: the server did not answer.");
    }
    historyTimer = setTimeout(loadHistory, HISTORY_REFRESH_MS[range] || 60000);
  }

  function chooseRange(event) {
    const button = event.target.closest("button[data-range]");
    if (!button) return;
    range = button.dataset.range;
    for (const b of $("ranges").querySelectorAll("button")) b.setAttribute("aria-pressed", String(b === button));
    loadHistory();
  }

  function resizeCharts() {
    const width = chartWidth();
    for (const chart of charts) chart.setSize({ width: width, height: 200 });
  }

  // ------------------------------------------------------------ sorting, the user filter, "show all"
  function redraw() {
    if (!latest) return;
    drawing = null;
    renderGpus(latest);
    renderHosts(latest, true);
  }

  $("sort").addEventListener("change", (event) => {
    view.sort = event.target.value;
    redraw();
  });
  $("user").addEventListener("change", (event) => {
    view.user = event.target.value;
    redraw();
  });
  function showAll(event) {
    const button = event.target.closest("button.more");
    if (!button) return;
    const key = button.dataset.gpu; // "3": this machine's GPU 3; "h1-3": GPU 3 of the second host
    if (view.expanded.has(key)) view.expanded.delete(key);
    else view.expanded.add(key);
    redraw();
  }
  $("gpus").addEventListener("click", showAll);
  $("hosts").addEventListener("click", showAll);

  // ------------------------------------------------------------ start
  $("ranges").addEventListener("click", chooseRange);
  if (typeof window.ResizeObserver === "function") new ResizeObserver(resizeCharts).observe($("charts"));
  else window.addEventListener("resize", resizeCharts);
  setInterval(renderFreshness, 1000);
  renderFreshness();
  readHostname();
  firstReading().then(startStream); // the current reading at once, then every new one as it comes
  loadHistory();
})();
