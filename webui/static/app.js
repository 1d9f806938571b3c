// Warren's UI: a page per view, drawn from what the live feed (/ws) pushes every second and
// from the management API, which it also acts through. Logs in once; the session cookie
// carries the login for the API and the feed.
"use strict";

// Rows of the queue table the broker sends each second.
const QUEUES_PAGE_SIZE = 100;

const state = {
  socket: null,
  tick: null,
  page: null,
  charts: [],
  browse: { requests: 0, handlers: new Map() },
  counts: { connections: -1, channels: -1 },
};
window.warren = state; // for the browser test and the curious

// ---------- helpers ----------

const $ = (selector, root = document) => root.querySelector(selector);
const enc = encodeURIComponent;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value) {
  if (value === undefined || value === null) return "–";
  if (typeof value === "number") {
    if (!Number.isInteger(value)) return value >= 100 ? Math.round(value).toLocaleString() : value.toFixed(1);
    return value.toLocaleString();
  }
  return String(value);
}

function rate(stats, name) {
  return (stats && stats[name + "_details"] && stats[name + "_details"].rate) || 0;
}

function toast(text, bad) {
  const box = $("#toast");
  box.textContent = text;
  box.className = "toast" + (bad ? " bad" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => box.classList.add("hidden"), 4000);
}

async function api(method, path, body, headers = {}) {
  const options = { method, headers: { "x-warren-ui": "1", ...headers }, credentials: "same-origin" };
  if (body !== undefined) {
    options.headers["content-type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = { reason: text }; }
  // 401 is also the answer to an operation the user's permissions refuse: only a session
  // that is over sends the user back to the login.
  if (response.status === 401 && !(await signedIn())) {
    showLogin();
    throw new Error("signed out");
  }
  if (!response.ok) throw new Error((data && data.reason) || response.statusText);
  return data;
}

// Whether the session is still valid (it ends when the user's access changes).
async function signedIn() {
  const response = await fetch("/api/whoami", { headers: { "x-warren-ui": "1" }, credentials: "same-origin" });
  return response.ok;
}

// ---------- login ----------

function showLogin() {
  $("#app").classList.add("hidden");
  $("#login").classList.remove("hidden");
  if (state.socket) state.socket.close();
}

async function start() {
  try {
    const me = await api("GET", "/api/whoami");
    $("#who").textContent = me.name;
  } catch (_) {
    showLogin();
    return;
  }
  $("#login").classList.add("hidden");
  $("#app").classList.remove("hidden");
  connect();
  route();
}

$("#login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = { username: $("#login-user").value, password: $("#login-password").value };
  const response = await fetch("/api/login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  if (!response.ok) {
    $("#login-error").textContent = "Login failed: check the user and password.";
    return;
  }
  $("#login-error").textContent = "";
  start();
});

$("#logout").addEventListener("click", async () => {
  await fetch("/api/logout", { method: "POST", credentials: "same-origin" });
  showLogin();
});

// ---------- the live feed ----------

function connect() {
  if (state.socket && state.socket.readyState <= 1) return;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws`);
  state.socket = socket;
  socket.onopen = () => {
    $("#live").className = "live on";
    $("#live").textContent = "live";
    subscribe();
  };
  socket.onclose = async () => {
    $("#live").className = "live off";
    $("#live").textContent = "reconnecting…";
    if ($("#app").classList.contains("hidden")) return;
    // The feed closes when the user's access changes: back to the login if the session ended.
    if (!(await signedIn())) return showLogin();
    setTimeout(connect, 1500);
  };
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "hello") {
      $("#node").textContent = message.node;
      state.history = message.history;
      if (state.page && state.page.hello) state.page.hello(message.history);
    } else if (message.type === "tick") {
      state.tick = message;
      onTick(message);
    } else if (message.type === "messages") {
      const handler = state.browse.handlers.get(message.id);
      state.browse.handlers.delete(message.id);
      if (handler) handler(message);
    }
  };
}

function send(message) {
  if (state.socket && state.socket.readyState === 1) state.socket.send(JSON.stringify(message));
}

function subscribe() {
  const wants = (state.page && state.page.subscription) || {};
  send({ type: "subscribe", queues: wants.queues || null, queue: wants.queue || null });
}

// Reads a queue's log by offset over the feed; resolves with the answer.
function browse(request) {
  return new Promise((resolve) => {
    const id = ++state.browse.requests;
    state.browse.handlers.set(id, resolve);
    send({ type: "browse", id, ...request });
  });
}

function onTick(tick) {
  const overview = tick.overview;
  if (state.page && state.page.tick) state.page.tick(tick);
  const changed = overview.connections !== state.counts.connections || overview.channels !== state.counts.channels;
  state.counts = { connections: overview.connections, channels: overview.channels };
  if (changed && state.page && state.page.refresh) state.page.refresh();
}

// ---------- routing ----------

const pages = {
  overview: overviewPage,
  queues: queuesPage,
  queue: queuePage,
  browse: browsePage,
  exchanges: exchangesPage,
  exchange: exchangePage,
  policies: policiesPage,
  connections: (root) => listPage("Connections", "/api/connections", connectionColumns, connectionActions)(root),
  channels: (root) => listPage("Channels", "/api/channels", channelColumns)(root),
  consumers: (root) => listPage("Consumers", "/api/consumers", consumerColumns)(root),
};

function route() {
  const [name, ...args] = (location.hash.replace(/^#\/?/, "") || "overview").split("/").map(decodeURIComponent);
  const make = pages[name] || pages.overview;
  for (const chart of state.charts) chart.destroy();
  state.charts = [];
  if (state.page && state.page.leave) state.page.leave();
  document.querySelectorAll(".sidebar a").forEach((a) => {
    const section = { queue: "queues", browse: "queues", exchange: "exchanges" }[name] || name;
    a.classList.toggle("active", a.dataset.page === section);
  });
  const root = $("#page");
  root.replaceChildren();
  state.page = make(root, ...args) || {};
  subscribe();
  if (state.tick && state.page.tick) state.page.tick(state.tick);
}

window.addEventListener("hashchange", route);

function chart(canvas, series) {
  const made = new LineChart(canvas, series);
  state.charts.push(made);
  return made;
}

function colors() {
  const style = getComputedStyle(document.documentElement);
  return { publish: style.getPropertyValue("--publish"), deliver: style.getPropertyValue("--deliver"), ack: style.getPropertyValue("--ack") };
}

// ---------- overview ----------

function overviewPage(root) {
  const c = colors();
  const cards = {};
  const card = (key, label) => (cards[key] = el("div", { class: "value", id: `card-${key}` }, "–")) && el("div", { class: "card" }, el("div", { class: "label" }, label), cards[key]);
  const rates = el("canvas", { class: "chart", id: "overview-rates" });
  const depth = el("canvas", { class: "chart", id: "overview-depth" });
  const nodes = el("tbody");
  root.append(
    el("div", { class: "header" }, el("div", {}, el("h1", {}, "Overview"), el("div", { class: "muted" }, "Live: every figure moves as the broker works, a point a second."))),
    el("div", { class: "cards" },
      card("publish", "Publish / s"), card("deliver", "Deliver / s"), card("ack", "Ack / s"),
      card("ready", "Ready"), card("unacked", "Unacked"), card("queues", "Queues"), card("connections", "Connections")),
    el("div", { class: "grid-2" },
      el("div", { class: "panel" }, el("h2", {}, "Message rates"), rates,
        el("div", { class: "legend" }, el("span", { style: `--c:${c.publish}` }, "publish"), el("span", { style: `--c:${c.deliver}` }, "deliver"), el("span", { style: `--c:${c.ack}` }, "ack"))),
      el("div", { class: "panel" }, el("h2", {}, "Queued messages"), depth,
        el("div", { class: "legend" }, el("span", { style: `--c:${c.deliver}` }, "ready"), el("span", { style: `--c:${c.ack}` }, "unacked")))),
    el("div", { class: "panel" }, el("h2", {}, "Nodes"), el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Node"), el("th", {}, "State"), el("th", {}, "Type"))), nodes)),
  );
  const rateChart = chart(rates, [{ name: "publish", color: c.publish }, { name: "deliver", color: c.deliver }, { name: "ack", color: c.ack }]);
  const depthChart = chart(depth, [{ name: "ready", color: c.deliver }, { name: "unacked", color: c.ack }]);
  const plot = (point) => {
    rateChart.push(point.at_ms, [point.publish, point.deliver_get, point.ack]);
    depthChart.push(point.at_ms, [point.ready, point.unacked]);
  };
  const hello = (history) => (history || []).forEach(plot);
  hello(state.history);
  let last = 0;
  return {
    hello,
    tick(tick) {
      const o = tick.overview, p = o.point;
      if (p && p.at_ms > last) {
        last = p.at_ms;
        plot(p);
      }
      cards.publish.textContent = fmt(rate(o.message_stats, "publish"));
      cards.deliver.textContent = fmt(rate(o.message_stats, "deliver_get"));
      cards.ack.textContent = fmt(rate(o.message_stats, "ack"));
      cards.ready.textContent = fmt(p ? p.ready : 0);
      cards.unacked.textContent = fmt(p ? p.unacked : 0);
      cards.queues.textContent = fmt(o.queues);
      cards.connections.textContent = fmt(o.connections);
      nodes.replaceChildren(...(o.nodes || []).map((n) => el("tr", {}, el("td", {}, n.name), el("td", {}, n.running ? "running" : "down"), el("td", {}, n.type))));
    },
  };
}

// ---------- tables ----------

// A sortable table of rows; columns: [{key, label, num, value(row), cell(row)}]. With
// options.onSort(key, up) the rows come sorted (by the broker) and a header click asks for
// another order instead of sorting here.
function table(columns, options = {}) {
  const body = el("tbody");
  const head = el("tr");
  let sort = options.sort || columns[0].key, up = options.up !== false;
  let rows = [];
  const render = () => {
    const column = columns.find((c) => c.key === sort) || columns[0];
    const value = column.value || ((row) => row[column.key]);
    const sorted = options.onSort ? rows : [...rows].sort((a, b) => {
      const x = value(a), y = value(b);
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return up ? order : -order;
    });
    head.replaceChildren(...columns.map((c) => el("th", {
      class: [c.num ? "num" : "", c.key === sort ? "sorted" : "", c.key === sort && up ? "up" : ""].join(" "),
      "data-key": c.key,
      onclick: () => {
        up = sort === c.key ? !up : c.num ? false : true;
        sort = c.key;
        if (options.onSort) options.onSort(sort, up);
        render();
      },
    }, c.label)));
    body.replaceChildren(...(sorted.length ? sorted.map((row) => el("tr", {}, ...columns.map((c) =>
      el("td", { class: c.num ? "num" : "" }, c.cell ? c.cell(row) : fmt((c.value || ((r) => r[c.key]))(row))))))
      : [el("tr", {}, el("td", { class: "empty", colspan: columns.length }, options.empty || "Nothing here yet."))]));
  };
  render();
  return { node: el("table", {}, el("thead", {}, head), body), set(next) { rows = next; render(); } };
}

function typeBadge(type) {
  return el("span", { class: `badge ${type}` }, type);
}

function queueLink(q) {
  return el("a", { href: `#/queue/${enc(q.vhost)}/${enc(q.name)}` }, q.name);
}

// ---------- queues ----------

function queuesPage(root) {
  const filter = el("input", { type: "search", placeholder: "Filter by name", id: "queue-filter" });
  const shown = el("span", { class: "muted small" });
  const columns = [
    { key: "name", label: "Name", cell: queueLink },
    { key: "type", label: "Type", cell: (q) => typeBadge(q.type) },
    { key: "messages_ready", label: "Ready", num: true },
    { key: "messages_unacknowledged", label: "Unacked", num: true },
    { key: "consumers", label: "Consumers", num: true },
    { key: "message_stats.publish_details.rate", label: "Publish / s", num: true, value: (q) => rate(q.message_stats, "publish") },
    { key: "message_stats.deliver_get_details.rate", label: "Deliver / s", num: true, value: (q) => rate(q.message_stats, "deliver_get") },
  ];
  // The broker filters, sorts and pages: the table shows one page of however many queues.
  const wanted = { name: "", sort: "name", sort_reverse: false, page: 1, page_size: QUEUES_PAGE_SIZE };
  const ask = (change) => { Object.assign(wanted, change); subscribe(); };
  const list = table(columns, { empty: "No queues match.", onSort: (key, up) => ask({ sort: key, sort_reverse: !up, page: 1 }) });
  const previous = el("button", { class: "secondary", id: "queues-previous", onclick: () => ask({ page: Math.max(1, wanted.page - 1) }) }, "‹");
  const next = el("button", { class: "secondary", id: "queues-next", onclick: () => ask({ page: wanted.page + 1 }) }, "›");
  const name = el("input", { placeholder: "New queue name", id: "new-queue-name" });
  const kind = el("select", { id: "new-queue-type" }, el("option", {}, "classic"), el("option", {}, "quorum"), el("option", {}, "stream"));
  const add = el("button", { class: "secondary", onclick: async () => {
    if (!name.value) return;
    try {
      await api("PUT", `/api/queues/%2F/${enc(name.value)}`, { durable: true, arguments: { "x-queue-type": kind.value } });
      toast(`Queue ${name.value} declared`);
      name.value = "";
    } catch (error) { toast(error.message, true); }
  } }, "Add queue");
  root.append(
    el("div", { class: "header" }, el("div", {}, el("h1", {}, "Queues & streams"), el("div", { class: "muted" }, "Depths and rates update every second.")),
      el("div", { class: "actions" }, name, kind, add)),
    el("div", { class: "toolbar" }, filter, shown, previous, next),
    el("div", { class: "panel" }, list.node),
  );
  const page = {
    subscription: { queues: wanted },
    tick(tick) {
      const listed = tick.queues;
      if (!listed || !listed.items) return;
      list.set(listed.items);
      wanted.page = listed.page;
      previous.disabled = listed.page <= 1;
      next.disabled = listed.page >= listed.page_count;
      previous.hidden = next.hidden = listed.page_count <= 1;
      const of = listed.filtered_count === listed.total_count ? "" : ` (${fmt(listed.total_count)} in all)`;
      shown.textContent = listed.page_count > 1
        ? `page ${listed.page} of ${listed.page_count}: ${fmt(listed.filtered_count)} queues${of}`
        : `${fmt(listed.filtered_count)} queues${of}`;
    },
  };
  filter.addEventListener("input", () => ask({ name: filter.value, page: 1 }));
  return page;
}

// ---------- one queue ----------

function queuePage(root, vhost, name) {
  const c = colors();
  const path = `/api/queues/${enc(vhost)}/${enc(name)}`;
  const props = el("dl", { class: "props" });
  const argumentsList = el("dl", { class: "props" });
  const depth = el("canvas", { class: "chart", id: "queue-depth" });
  const bindings = table([
    { key: "source", label: "From", value: (b) => b.source || "(default exchange)" },
    { key: "routing_key", label: "Routing key" },
    { key: "arguments", label: "Arguments", value: (b) => JSON.stringify(b.arguments) },
  ]);
  const consumers = table([
    { key: "consumer_tag", label: "Tag" },
    { key: "channel", label: "Channel", value: (x) => x.channel_details.name },
    { key: "ack_required", label: "Ack", value: (x) => (x.ack_required ? "yes" : "no") },
    { key: "prefetch_count", label: "Prefetch", num: true },
  ], { empty: "No consumers on this node." });
  const browseLink = el("a", { href: `#/browse/${enc(vhost)}/${enc(name)}`, class: "hidden", id: "browse-link" }, el("button", { class: "secondary" }, "Browse messages"));
  const purge = el("button", { class: "secondary", id: "purge", onclick: async () => {
    if (!confirm(`Purge every ready message of ${name}?`)) return;
    try { await api("DELETE", `${path}/contents`); toast(`${name} purged`); } catch (error) { toast(error.message, true); }
  } }, "Purge");
  const remove = el("button", { class: "danger", onclick: async () => {
    if (!confirm(`Delete queue ${name} and its messages?`)) return;
    try { await api("DELETE", path); toast(`${name} deleted`); location.hash = "#/queues"; } catch (error) { toast(error.message, true); }
  } }, "Delete");
  const title = el("h1", {}, name);
  root.append(
    el("div", { class: "header" }, el("div", {}, title, el("div", { class: "muted" }, `in vhost ${vhost}`)), el("div", { class: "actions" }, browseLink, purge, remove)),
    el("div", { class: "grid-2" },
      el("div", { class: "panel" }, el("h2", {}, "Depth"), depth,
        el("div", { class: "legend" }, el("span", { style: `--c:${c.deliver}` }, "ready"), el("span", { style: `--c:${c.ack}` }, "unacked"))),
      el("div", { class: "panel" }, el("h2", {}, "Details"), props, el("h2", { style: "margin-top:18px" }, "Arguments"), argumentsList)),
    el("div", { class: "grid-2" }, el("div", { class: "panel" }, el("h2", {}, "Bindings"), bindings.node), el("div", { class: "panel" }, el("h2", {}, "Consumers"), consumers.node)),
  );
  const depthChart = chart(depth, [{ name: "ready", color: c.deliver }, { name: "unacked", color: c.ack }]);
  const refresh = async () => {
    try {
      bindings.set(await api("GET", `${path}/bindings`));
      const all = await api("GET", `/api/consumers/${enc(vhost)}`);
      consumers.set(all.filter((x) => x.queue.name === name));
    } catch (_) { /* shown by the tick */ }
  };
  refresh();
  return {
    subscription: { queue: { vhost, name } },
    refresh,
    tick(tick) {
      const q = tick.queue;
      if (!q || q.name !== name) {
        if (tick.subscribed_queue) title.textContent = `${name} (gone)`;
        return;
      }
      title.textContent = name;
      depthChart.push(tick.at_ms || Date.now(), [q.messages_ready, q.messages_unacknowledged]);
      // Streams keep their whole log; a durable classic queue's log holds its persistent
      // messages until their segment is reclaimed.
      browseLink.classList.toggle("hidden", !(q.type === "stream" || (q.type === "classic" && q.durable && !q.exclusive)));
      purge.classList.toggle("hidden", q.type === "stream");
      const rows = [["Type", typeBadge(q.type)], ["Durable", q.durable ? "yes" : "no"], ["Ready", fmt(q.messages_ready)], ["Unacked", fmt(q.messages_unacknowledged)],
        ["Consumers", fmt(q.consumers)], ["Publish / s", fmt(rate(q.message_stats, "publish"))], ["Deliver / s", fmt(rate(q.message_stats, "deliver_get"))],
        ["Node", q.node], ...(q.leader ? [["Leader", q.leader], ["Members", q.members.join(", ")]] : []),
        ["Policy", q.policy || "none"], ...(q.operator_policy ? [["Operator policy", q.operator_policy]] : []),
        ...(q.policy || q.operator_policy ? [["Effective policy", el("span", { class: "mono" }, JSON.stringify(q.effective_policy_definition))]] : [])];
      props.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
      const args = Object.entries(q.arguments || {});
      argumentsList.replaceChildren(...(args.length ? args.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { class: "mono" }, JSON.stringify(v))]) : [el("dd", { class: "muted" }, "none")]));
    },
  };
}

// ---------- message browser ----------

function browsePage(root, vhost, name) {
  const start = el("select", { id: "browse-start" }, el("option", { value: "first" }, "first"), el("option", { value: "last" }, "last"), el("option", { value: "offset" }, "offset"), el("option", { value: "timestamp" }, "time"));
  const at = el("input", { id: "browse-at", placeholder: "offset or 2026-12-01T10:00", style: "width:200px" });
  const tag = el("input", { id: "browse-filter", placeholder: "tag filter (x-stream-filter-value)", style: "width:240px" });
  const size = el("select", { id: "browse-size" }, ...[10, 25, 50, 100].map((n) => el("option", { value: n, selected: n === 25 }, `${n} per page`)));
  const open = el("button", { id: "browse-open" }, "Open");
  const prev = el("button", { class: "secondary", id: "browse-prev" }, "← Previous");
  const next = el("button", { class: "secondary", id: "browse-next" }, "Next →");
  const tail = el("button", { class: "secondary", id: "browse-tail" }, "Follow live");
  const where = el("span", { class: "muted small", id: "browse-where" });
  const list = el("div", { class: "messages", id: "browse-messages" });
  root.append(
    el("div", { class: "header" }, el("div", {}, el("h1", {}, `Browse ${name}`), el("div", { class: "muted" }, "Reading by offset never consumes a message.")),
      el("div", { class: "actions" }, el("a", { href: `#/queue/${enc(vhost)}/${enc(name)}` }, el("button", { class: "secondary" }, "Back to queue")))),
    el("div", { class: "toolbar" }, "Start at", start, at, tag, size, open),
    el("div", { class: "toolbar" }, prev, next, tail, where),
    el("div", { class: "panel" }, list),
  );
  let view = { first: 0, next: 0, begin: 0, end: 0 };
  let following = null;
  const count = () => Number(size.value);
  const show = (answer, append) => {
    if (answer.error) { toast(answer.error, true); return; }
    const items = answer.messages.map(messageView);
    if (append) {
      list.append(...items);
      while (list.children.length > 200) list.firstChild.remove();
    } else {
      list.replaceChildren(...(items.length ? items : [el("div", { class: "empty" }, "No messages here.")]));
    }
    if (!append) view.begin = answer.messages.length ? answer.messages[0].offset : answer.next_offset;
    view = { ...view, next: answer.next_offset, first: answer.first_offset, end: answer.end_offset };
    where.textContent = `offsets ${view.first}–${Math.max(view.first, view.end - 1)} held; next ${view.next}`;
    prev.disabled = view.begin <= view.first;
    next.disabled = view.next >= view.end;
  };
  const read = (query, append) => browse({ vhost, queue: name, count: count(), filter: tag.value || undefined, ...query }).then((a) => show(a, append));
  const startQuery = () => {
    if (start.value === "offset") return { offset: String(Number(at.value) || 0) };
    if (start.value === "timestamp") return { timestamp: Date.parse(at.value) || Date.now() };
    return { offset: start.value };
  };
  open.onclick = () => read(startQuery());
  next.onclick = () => read({ offset: String(view.next) });
  prev.onclick = () => read({ offset: String(Math.max(view.first, view.begin - count())) });
  tail.onclick = () => {
    if (following) { clearInterval(following); following = null; tail.textContent = "Follow live"; return; }
    tail.textContent = "Stop following";
    following = true;
  };
  read({ offset: "first" });
  return {
    tick() {
      if (following && view.next < Infinity) read({ offset: String(view.next) }, true);
    },
    leave() { following = null; },
  };
}

function messageView(m) {
  const headers = m.properties && m.properties.headers;
  const shown = headers && Object.keys(headers).length ? headers : null;
  return el("div", { class: "message", "data-offset": m.offset },
    el("header", {}, el("b", {}, `#${m.offset}`), el("span", {}, new Date(m.timestamp).toLocaleString()),
      el("span", {}, `routing key ${m.routing_key || "–"}`), el("span", {}, `${fmt(m.payload_bytes)} bytes`),
      m.payload_encoding === "base64" ? el("span", { class: "badge" }, "base64") : null),
    el("pre", {}, m.payload),
    shown ? el("div", { class: "headers mono" }, "headers ", JSON.stringify(shown)) : null);
}

// ---------- exchanges ----------

function exchangesPage(root) {
  const list = table([
    { key: "name", label: "Name", cell: (x) => el("a", { href: `#/exchange/${enc(x.vhost)}/${enc(x.name || "amq.default")}` }, x.name || "(default exchange)") },
    { key: "type", label: "Type" },
    { key: "durable", label: "Durable", value: (x) => (x.durable ? "yes" : "no") },
    { key: "arguments", label: "Arguments", value: (x) => JSON.stringify(x.arguments) },
  ]);
  root.append(el("div", { class: "header" }, el("h1", {}, "Exchanges")), el("div", { class: "panel" }, list.node));
  const refresh = async () => list.set(await api("GET", "/api/exchanges"));
  refresh();
  return { refresh };
}

function exchangePage(root, vhost, name) {
  const key = el("input", { id: "publish-key", placeholder: "routing key" });
  const headers = el("input", { id: "publish-headers", placeholder: '{"x-stream-filter-value": "eu"}' });
  const persistent = el("input", { type: "checkbox", id: "publish-persistent", checked: true });
  const payload = el("textarea", { id: "publish-payload", placeholder: "payload" });
  const bindings = table([
    { key: "destination", label: "To" },
    { key: "destination_type", label: "Kind" },
    { key: "routing_key", label: "Routing key" },
  ], { empty: "No bindings from this exchange." });
  const form = el("form", { class: "inline", id: "publish-form" },
    el("label", {}, "Routing key"), key, el("label", {}, "Headers (JSON)"), headers, el("label", {}, "Persistent"), persistent,
    el("label", {}, "Payload"), payload, el("span"), el("button", { type: "submit" }, "Publish message"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const properties = { delivery_mode: persistent.checked ? 2 : 1 };
      if (headers.value) properties.headers = JSON.parse(headers.value);
      const answer = await api("POST", `/api/exchanges/${enc(vhost)}/${enc(name)}/publish`,
        { routing_key: key.value, payload: payload.value, payload_encoding: "string", properties });
      toast(answer.routed ? "Published and routed" : "Published, but no queue took it", !answer.routed);
    } catch (error) { toast(error.message, true); }
  });
  root.append(
    el("div", { class: "header" }, el("div", {}, el("h1", {}, name === "amq.default" ? "(default exchange)" : name), el("div", { class: "muted" }, `in vhost ${vhost}`))),
    el("div", { class: "grid-2" }, el("div", { class: "panel" }, el("h2", {}, "Publish"), form), el("div", { class: "panel" }, el("h2", {}, "Bindings"), bindings.node)),
  );
  if (name !== "amq.default") api("GET", `/api/exchanges/${enc(vhost)}/${enc(name)}/bindings/source`).then(bindings.set, () => {});
  return {};
}

// ---------- policies ----------

// Policies and operator policies: listed, added or replaced (the form; a row's Edit fills it),
// deleted. Which keys change nothing in Warren is shown beside each definition.
function policiesPage(root) {
  const field = (id, attrs = {}) => el("input", { id, ...attrs });
  const kind = el("select", { id: "policy-kind" }, el("option", { value: "policies" }, "policy"), el("option", { value: "operator-policies" }, "operator policy"));
  const vhost = field("policy-vhost", { value: "/" });
  const name = field("policy-name", { placeholder: "name" });
  const pattern = field("policy-pattern", { placeholder: "^orders\\." });
  const applyTo = el("select", { id: "policy-apply-to" }, ...["all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"].map((v) => el("option", { value: v }, v)));
  const priority = field("policy-priority", { type: "number", value: "0" });
  const definition = el("textarea", { id: "policy-definition", placeholder: '{"message-ttl": 60000, "max-length": 10000}' });
  const form = el("form", { class: "inline", id: "policy-form" },
    el("label", {}, "Kind"), kind, el("label", {}, "Vhost"), vhost, el("label", {}, "Name"), name, el("label", {}, "Pattern"), pattern,
    el("label", {}, "Apply to"), applyTo, el("label", {}, "Priority"), priority, el("label", {}, "Definition (JSON)"), definition,
    el("span"), el("button", { type: "submit" }, "Save policy"));
  const columns = (base) => [
    { key: "vhost", label: "Vhost" },
    { key: "name", label: "Name" },
    { key: "pattern", label: "Pattern", cell: (p) => el("span", { class: "mono" }, p.pattern) },
    { key: "apply-to", label: "Apply to" },
    { key: "priority", label: "Priority", num: true },
    { key: "definition", label: "Definition", value: (p) => JSON.stringify(p.definition), cell: (p) => el("span", { class: "mono" }, JSON.stringify(p.definition)) },
    { key: "no_effect", label: "No effect in Warren", value: (p) => Object.keys(p.no_effect || {}).join(", ") },
    { key: "action", label: "", cell: (p) => el("span", {},
      el("button", { class: "secondary", onclick: () => {
        kind.value = base; vhost.value = p.vhost; name.value = p.name; pattern.value = p.pattern;
        applyTo.value = p["apply-to"]; priority.value = p.priority; definition.value = JSON.stringify(p.definition);
      } }, "Edit"),
      el("button", { class: "danger", onclick: async () => {
        if (!confirm(`Delete ${base === "policies" ? "policy" : "operator policy"} ${p.name}?`)) return;
        try { await api("DELETE", `/api/${base}/${enc(p.vhost)}/${enc(p.name)}`); toast(`${p.name} deleted`); refresh(); } catch (error) { toast(error.message, true); }
      } }, "Delete")) },
  ];
  const policies = table(columns("policies"), { sort: "priority", empty: "No policies." });
  const operatorPolicies = table(columns("operator-policies"), { sort: "priority", empty: "No operator policies." });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = { pattern: pattern.value, definition: JSON.parse(definition.value || "{}"), priority: Number(priority.value || 0), "apply-to": applyTo.value };
      await api("PUT", `/api/${kind.value}/${enc(vhost.value)}/${enc(name.value)}`, body);
      toast(`${name.value} saved`);
      refresh();
    } catch (error) { toast(error.message, true); }
  });
  root.append(
    el("div", { class: "header" }, el("div", {}, el("h1", {}, "Policies"), el("div", { class: "muted" }, "Queues and exchanges whose names a pattern matches run with its definition; the highest priority wins."))),
    el("div", { class: "panel" }, el("h2", {}, "Add or replace"), form),
    el("div", { class: "panel", id: "policies" }, el("h2", {}, "Policies"), policies.node),
    el("div", { class: "panel", id: "operator-policies" }, el("h2", {}, "Operator policies"), operatorPolicies.node),
  );
  const refresh = async () => {
    try {
      policies.set(await api("GET", "/api/policies"));
      operatorPolicies.set(await api("GET", "/api/operator-policies"));
    } catch (_) { /* shown on the next refresh */ }
  };
  refresh();
  return { refresh };
}

// ---------- connections, channels, consumers ----------

const connectionColumns = [
  { key: "name", label: "Name" },
  { key: "user", label: "User" },
  { key: "vhost", label: "Vhost" },
  { key: "client", label: "Client", value: (c) => [c.client_properties.product, c.client_properties.connection_name].filter(Boolean).join(" · ") },
  { key: "channels", label: "Channels", num: true },
  { key: "recv_oct", label: "Received", num: true },
  { key: "send_oct", label: "Sent", num: true },
];

function connectionActions(row) {
  return el("button", { class: "danger", onclick: async () => {
    const reason = prompt("Close this connection. The client is told:", "Closed by an operator");
    if (reason === null) return;
    try { await api("DELETE", `/api/connections/${enc(row.name)}`, undefined, { "X-Reason": reason }); toast("Connection closed"); } catch (error) { toast(error.message, true); }
  } }, "Close");
}

const channelColumns = [
  { key: "name", label: "Channel" },
  { key: "user", label: "User" },
  { key: "prefetch_count", label: "Prefetch", num: true },
  { key: "consumer_count", label: "Consumers", num: true },
  { key: "messages_unacknowledged", label: "Unacked", num: true },
];

const consumerColumns = [
  { key: "consumer_tag", label: "Tag" },
  { key: "queue", label: "Queue", value: (x) => x.queue.name, cell: (x) => queueLink(x.queue) },
  { key: "channel", label: "Channel", value: (x) => x.channel_details.name },
  { key: "ack_required", label: "Ack", value: (x) => (x.ack_required ? "yes" : "no") },
  { key: "prefetch_count", label: "Prefetch", num: true },
];

function listPage(title, path, columns, action) {
  return (root) => {
    const all = action ? [...columns, { key: "action", label: "", cell: action }] : columns;
    const list = table(all, { empty: `No ${title.toLowerCase()} on this node.` });
    root.append(el("div", { class: "header" }, el("h1", {}, title)), el("div", { class: "panel" }, list.node));
    const refresh = async () => list.set(await api("GET", path));
    refresh();
    return { refresh };
  };
}

start();
