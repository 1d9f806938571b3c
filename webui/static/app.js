// Warren's UI: a page per view, drawn from what the live feed (/ws) pushes every second and
// from the management API, which it also acts through. Logs in once; the session cookie
// carries the login for the API and the feed.
"use strict";

// Rows of the queue table the broker sends each second.
const QUEUES_PAGE_SIZE = 100;
// Where the chosen virtual host is remembered between visits.
const VHOST_KEY = "warren.vhost";
// The tags Warren's access control acts on, offered as hints on the user forms.
const KNOWN_TAGS = ["administrator", "monitoring", "policymaker", "management", "impersonator"];
// How long a browse request over the feed may take before it is given up.
const BROWSE_TIMEOUT_MS = 10_000;

const state = {
  socket: null,
  tick: null,
  page: null,
  charts: [],
  browse: { requests: 0, handlers: new Map() },
  counts: { connections: -1, channels: -1 },
  vhost: localStorage.getItem(VHOST_KEY) || "",
  vhosts: [],
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

function fmtBytes(bytes) {
  if (typeof bytes !== "number") return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return `${unit ? value.toFixed(value >= 100 ? 0 : 1) : value} ${units[unit]}`;
}

function fmtDuration(ms) {
  if (typeof ms !== "number") return "–";
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
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

// Calls the API; throws an Error with the broker's reason (and the HTTP status) if it refuses.
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
    showLogin(SESSION_ENDED);
    throw new Error("signed out");
  }
  if (!response.ok) {
    const error = new Error((data && data.reason) || response.statusText);
    error.status = response.status;
    throw error;
  }
  return data;
}

// Whether the session is still valid (it ends when the user's access changes).
async function signedIn() {
  const response = await fetch("/api/whoami", { headers: { "x-warren-ui": "1" }, credentials: "same-origin" });
  return response.ok;
}

// A button that runs `action`, its failure told in a toast.
function button(label, action, attrs = {}) {
  const run = async () => { try { await action(); } catch (error) { toast(error.message, true); } };
  return el("button", { class: "secondary", type: "button", ...attrs, onclick: run }, label);
}

// A form of labelled fields ([label, input] rows) whose submit runs `action`; a thrown error
// (a refused input, or the broker's reason) is told in a toast.
function form(id, rows, submit, action) {
  const fields = rows.flatMap(([label, input]) => [el("label", { for: input.id }, label), input]);
  const node = el("form", { class: "inline", id }, ...fields, el("span"), el("button", { type: "submit" }, submit));
  node.addEventListener("submit", async (event) => {
    event.preventDefault();
    try { await action(); } catch (error) { toast(error.message, true); }
  });
  return node;
}

function input(id, attrs = {}) {
  return el("input", { id, ...attrs });
}

// The text of a required field, or an error saying which one is missing.
function required(field, what) {
  const value = field.value.trim();
  if (!value) throw new Error(`${what} must be given`);
  return value;
}

// Tags typed as "a, b c": the list (any tag may be given, as in RabbitMQ: those Warren acts
// on are the KNOWN_TAGS).
function parseTags(text) {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}

function tagsView(tags) {
  const list = Array.isArray(tags) ? tags : String(tags || "").split(",").filter(Boolean);
  return list.length ? el("span", { class: "tags" }, ...list.map((t) => el("span", { class: "badge tag" }, t))) : el("span", { class: "muted" }, "none");
}

function header(title, subtitle, ...actions) {
  return el("div", { class: "header" },
    el("div", {}, el("h1", {}, title), subtitle ? el("div", { class: "muted" }, subtitle) : null),
    actions.length ? el("div", { class: "actions" }, ...actions) : null);
}

function panel(title, ...children) {
  return el("div", { class: "panel" }, title ? el("h2", {}, title) : null, ...children);
}

// What a page says of an object that is not there, in place of its actions.
function missing(root, text) {
  root.replaceChildren(header("Not found"), el("div", { class: "panel missing", id: "missing" }, text));
}

// ---------- virtual hosts: the selector in the header ----------

// `base` of one vhost's list when one is chosen (RabbitMQ's routes end in the vhost).
function vhostScoped(base) {
  return state.vhost ? `${base}/${enc(state.vhost)}` : base;
}

// The rows of the chosen vhost (all when "All" is chosen).
function inVhost(rows, vhostOf = (row) => row.vhost) {
  return state.vhost ? rows.filter((row) => vhostOf(row) === state.vhost) : rows;
}

function scopeNote(what) {
  return state.vhost ? `${what} in virtual host ${state.vhost} (chosen at the top).` : `${what} in every virtual host.`;
}

function chooseVhost(name) {
  state.vhost = name;
  if (name) localStorage.setItem(VHOST_KEY, name);
  else localStorage.removeItem(VHOST_KEY);
  $("#vhost-select").value = name;
}

// Reads the vhosts the user sees into the selector; a remembered vhost that is gone is "All".
async function loadVhosts() {
  try {
    state.vhosts = (await api("GET", "/api/vhosts")).map((v) => v.name);
  } catch (_) { return; }
  if (state.vhost && !state.vhosts.includes(state.vhost)) chooseVhost("");
  $("#vhost-select").replaceChildren(el("option", { value: "" }, "All"), ...state.vhosts.map((v) => el("option", { value: v }, v)));
  $("#vhost-select").value = state.vhost;
}

$("#vhost-select").addEventListener("change", (event) => {
  chooseVhost(event.target.value);
  route();
});

// A vhost picker for a form, on the chosen vhost (or the default one).
function vhostPicker(id) {
  const names = state.vhosts.length ? state.vhosts : ["/"];
  const chosen = state.vhost || (names.includes("/") ? "/" : names[0]);
  return el("select", { id }, ...names.map((v) => el("option", { value: v, selected: v === chosen }, v)));
}

function vhostLink(name) {
  return el("a", { href: `#/vhost/${enc(name)}` }, name);
}

// ---------- login ----------

// Why a session ends under the user's feet: the broker ends it when the user's access changes,
// and a new or deleted virtual host changes its creator's permissions.
const SESSION_ENDED = "Your session ended: your password, tags or permissions changed (creating or deleting a virtual host changes your permissions), or you signed out elsewhere. Sign in again.";

function showLogin(reason) {
  $("#app").classList.add("hidden");
  $("#login").classList.remove("hidden");
  $("#login-error").textContent = reason || "";
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
  await loadVhosts();
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
    if (!(await signedIn())) return showLogin(SESSION_ENDED);
    setTimeout(connect, 1500);
  };
  socket.onmessage = (event) => received(JSON.parse(event.data));
}

function received(message) {
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
}

function send(message) {
  if (state.socket && state.socket.readyState === 1) state.socket.send(JSON.stringify(message));
}

function subscribe() {
  const wants = (state.page && state.page.subscription) || {};
  send({ type: "subscribe", queues: wants.queues || null, queue: wants.queue || null });
}

// Reads a queue's log by offset over the feed; resolves with the answer (an error if none
// comes in time: the feed may be reconnecting).
function browse(request) {
  return new Promise((resolve) => {
    const id = ++state.browse.requests;
    const timer = setTimeout(() => {
      state.browse.handlers.delete(id);
      resolve({ error: "the live feed did not answer: is it reconnecting?" });
    }, BROWSE_TIMEOUT_MS);
    state.browse.handlers.set(id, (answer) => { clearTimeout(timer); resolve(answer); });
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
  nodes: nodesPage,
  queues: queuesPage,
  queue: queuePage,
  browse: browsePage,
  exchanges: exchangesPage,
  exchange: exchangePage,
  connections: (root) => listPage(root, "Connections", () => "/api/connections", connectionColumns, connectionActions),
  channels: (root) => listPage(root, "Channels", () => "/api/channels", channelColumns),
  consumers: (root) => listPage(root, "Consumers", () => vhostScoped("/api/consumers"), consumerColumns),
  users: usersPage,
  user: userPage,
  vhosts: vhostsPage,
  vhost: vhostPage,
  permissions: permissionsPage,
  "topic-permissions": topicPermissionsPage,
  policies: policiesPage,
};

// The sidebar entry each detail page belongs to.
const SECTIONS = { queue: "queues", browse: "queues", exchange: "exchanges", user: "users", vhost: "vhosts" };

// The page name and its arguments in the location's hash; null if the hash does not decode.
function parseHash() {
  try {
    return (location.hash.replace(/^#\/?/, "") || "overview").split("/").map(decodeURIComponent);
  } catch (_) {
    return null;
  }
}

function route() {
  const [name, ...args] = parseHash() || ["?"];
  const make = Object.hasOwn(pages, name) ? pages[name] : null;
  // A detail page needs each of its names (queue/{vhost}/{name}).
  const fits = make && args.filter((a) => a !== "").length >= make.length - 1;
  for (const made of state.charts) made.destroy();
  state.charts = [];
  if (state.page && state.page.leave) state.page.leave();
  document.querySelectorAll(".sidebar a").forEach((a) => a.classList.toggle("active", a.dataset.page === (SECTIONS[name] || name)));
  const root = $("#page");
  root.replaceChildren();
  state.page = (fits ? make(root, ...args) : noSuchPage(root)) || {};
  subscribe();
  if (state.tick && state.page.tick) state.page.tick(state.tick);
}

window.addEventListener("hashchange", route);

function noSuchPage(root) {
  root.append(header("No such page", `Nothing lives at ${location.hash || "#/"}.`),
    el("div", { class: "panel missing", id: "no-such-page" }, "No such page. ", el("a", { href: "#/overview" }, "Back to the overview")));
  return {};
}

function chart(canvas, series) {
  const made = new LineChart(canvas, series);
  state.charts.push(made);
  return made;
}

function colors() {
  const style = getComputedStyle(document.documentElement);
  return { publish: style.getPropertyValue("--publish"), deliver: style.getPropertyValue("--deliver"), ack: style.getPropertyValue("--ack") };
}

// ---------- tables ----------

// A sortable table of rows; columns: [{key, label, num, value(row), cell(row)}]. With
// options.onSort(key, up) the rows come sorted (by the broker) and a header click asks for
// another order instead of sorting here. Each cell is marked data-col=its column's key.
function table(columns, options = {}) {
  const body = el("tbody");
  const head = el("tr");
  let sort = options.sort || columns[0].key, up = options.up !== false;
  let rows = [], failure = null;
  const valueOf = (column) => column.value || ((row) => row[column.key]);
  const sorted = () => {
    const value = valueOf(columns.find((c) => c.key === sort) || columns[0]);
    return options.onSort ? rows : [...rows].sort((a, b) => {
      const x = value(a), y = value(b);
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x ?? "").localeCompare(String(y ?? ""));
      return up ? order : -order;
    });
  };
  const headCell = (c) => el("th", {
    class: [c.num ? "num" : "", c.key === sort ? "sorted" : "", c.key === sort && up ? "up" : ""].join(" "),
    "data-key": c.key,
    onclick: () => {
      up = sort === c.key ? !up : !c.num;
      sort = c.key;
      if (options.onSort) options.onSort(sort, up);
      render();
    },
  }, c.label);
  const rowOf = (row) => el("tr", {}, ...columns.map((c) =>
    el("td", { class: c.num ? "num" : "", "data-col": c.key }, c.cell ? c.cell(row) : fmt(valueOf(c)(row)))));
  const render = () => {
    head.replaceChildren(...columns.map(headCell));
    const shown = sorted();
    const empty = failure ? el("td", { class: "empty error", colspan: columns.length }, failure)
      : el("td", { class: "empty", colspan: columns.length }, options.empty || "Nothing here yet.");
    body.replaceChildren(...(shown.length && !failure ? shown.map(rowOf) : [el("tr", {}, empty)]));
  };
  render();
  return {
    node: el("table", { id: options.id }, el("thead", {}, head), body),
    set(next) { rows = next; failure = null; render(); },
    fail(reason) { failure = reason; render(); },
  };
}

// Fills `list` from GET `path`; a refusal is shown in the table.
async function fill(list, path, keep = (rows) => rows) {
  try {
    list.set(keep(await api("GET", path)));
  } catch (error) {
    list.fail(error.message);
  }
}

function typeBadge(type) {
  return el("span", { class: `badge ${type}` }, type);
}

function queueLink(q) {
  return el("a", { href: `#/queue/${enc(q.vhost)}/${enc(q.name)}` }, q.name);
}

function dangerButton(label, question, action, id) {
  return button(label, async () => { if (confirm(question)) await action(); }, { class: "danger", id });
}

// ---------- overview ----------

function overviewPage(root) {
  const c = colors();
  const cards = {};
  const card = (key, label) => (cards[key] = el("div", { class: "value", id: `card-${key}` }, "–")) && el("div", { class: "card" }, el("div", { class: "label" }, label), cards[key]);
  const rates = el("canvas", { class: "chart", id: "overview-rates" });
  const depth = el("canvas", { class: "chart", id: "overview-depth" });
  const nodes = nodesTable();
  root.append(
    header("Overview", "Live: every figure moves as the broker works, a point a second."),
    el("div", { class: "cards" },
      card("publish", "Publish / s"), card("deliver", "Deliver / s"), card("ack", "Ack / s"),
      card("ready", "Ready"), card("unacked", "Unacked"), card("queues", "Queues"), card("connections", "Connections")),
    el("div", { class: "grid-2" },
      panel("Message rates", rates,
        el("div", { class: "legend" }, el("span", { style: `--c:${c.publish}` }, "publish"), el("span", { style: `--c:${c.deliver}` }, "deliver"), el("span", { style: `--c:${c.ack}` }, "ack"))),
      panel("Queued messages", depth,
        el("div", { class: "legend" }, el("span", { style: `--c:${c.deliver}` }, "ready"), el("span", { style: `--c:${c.ack}` }, "unacked")))),
    panel("Nodes", nodes.alarms, nodes.node, el("div", { class: "small muted" }, el("a", { href: "#/nodes" }, "Nodes page"), " (updated every second)")),
  );
  const rateChart = chart(rates, [{ name: "publish", color: c.publish }, { name: "deliver", color: c.deliver }, { name: "ack", color: c.ack }]);
  const depthChart = chart(depth, [{ name: "ready", color: c.deliver }, { name: "unacked", color: c.ack }]);
  const plot = (point) => {
    rateChart.push(point.at_ms, [point.publish, point.deliver_get, point.ack]);
    depthChart.push(point.at_ms, [point.ready, point.unacked]);
  };
  const hello = (history) => (history || []).forEach(plot);
  hello(state.history);
  let last = 0, ticks = 0;
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
      // The nodes' figures are read from every node: every five seconds here.
      if (ticks++ % 5 === 0) nodes.refresh(o.nodes);
    },
  };
}

// ---------- nodes ----------

// A figure against its limit: "120 MiB / 1.6 GiB", a bar, red when its alarm is on.
function gauge(used, limit, alarm, format, alarmText) {
  if (typeof used !== "number") return "–";
  const share = typeof limit === "number" && limit > 0 ? Math.min(1, used / limit) : null;
  return el("span", { class: "gauge" + (alarm ? " alarm" : "") },
    el("span", {}, `${format(used)} / ${typeof limit === "number" ? format(limit) : "–"}`),
    share === null ? null : el("span", { class: "bar" }, el("span", { style: `width:${(share * 100).toFixed(1)}%` })),
    alarm ? el("b", {}, alarmText) : null);
}

function diskCell(n) {
  if (typeof n.disk_free !== "number") return "–";
  return el("span", { class: "gauge" + (n.disk_free_alarm ? " alarm" : "") },
    el("span", {}, `${fmtBytes(n.disk_free)} free`), el("span", { class: "muted small" }, `limit ${fmtBytes(n.disk_free_limit)}`),
    n.disk_free_alarm ? el("b", {}, "disk alarm") : null);
}

function nodeState(n) {
  const running = n.running ? el("span", {}, "running") : el("span", { class: "alarm" }, "down");
  return el("span", {}, running, n.figures_error ? el("div", { class: "alarm small" }, `no figures: ${n.figures_error}`) : null);
}

function listenersText(n) {
  if (!Array.isArray(n.listeners)) return "–";
  return n.listeners.map((l) => `${l.protocol} ${l.ip_address}:${l.port}`).join(", ") || "none";
}

function listenersCell(n) {
  if (!Array.isArray(n.listeners)) return "–";
  return el("div", { class: "small" }, ...n.listeners.map((l) => el("div", {}, `${l.protocol} ${l.ip_address}:${l.port}`)));
}

const nodeColumns = [
  { key: "name", label: "Node" },
  { key: "running", label: "State", value: (n) => (n.running ? "running" : "down"), cell: nodeState },
  { key: "type", label: "Type" },
  { key: "mem_used", label: "Memory / watermark", num: true, cell: (n) => gauge(n.mem_used, n.mem_limit, n.mem_alarm, fmtBytes, "memory alarm") },
  { key: "disk_free", label: "Disk free / limit", num: true, cell: diskCell },
  { key: "fd_used", label: "File descriptors", num: true, cell: (n) => gauge(n.fd_used, n.fd_total, false, fmt) },
  { key: "sockets_used", label: "Sockets", num: true },
  { key: "connections", label: "Connections", num: true },
  { key: "uptime", label: "Uptime", num: true, cell: (n) => fmtDuration(n.uptime) },
  { key: "listeners", label: "Listeners", value: listenersText, cell: listenersCell },
];

// The nodes with their figures from GET /api/nodes (monitors and administrators); for other
// users, the nodes the feed names, without figures. The alarms that are on, in red above.
function nodesTable() {
  const list = table(nodeColumns, { empty: "No nodes.", id: "nodes" });
  const alarms = el("div", { id: "node-alarms" });
  let reading = false;
  const showAlarms = (nodes) => {
    const on = nodes.flatMap((n) => [n.mem_alarm ? `memory alarm on ${n.name}` : null, n.disk_free_alarm ? `disk alarm on ${n.name}` : null]).filter(Boolean);
    alarms.replaceChildren(...on.map((text) => el("div", { class: "alarm-banner" }, `${text}: publishers are blocked`)));
  };
  const refresh = async (fromFeed) => {
    if (reading) return;
    reading = true;
    try {
      const nodes = await api("GET", "/api/nodes");
      list.set(nodes);
      showAlarms(nodes);
    } catch (_) {
      if (fromFeed) list.set(fromFeed);
    } finally { reading = false; }
  };
  return { node: list.node, alarms, refresh };
}

function nodesPage(root) {
  const nodes = nodesTable();
  root.append(header("Nodes", "Memory, disk, descriptors and sockets of each node, read every second; an alarm blocks publishers."),
    panel(null, nodes.alarms, nodes.node));
  return { tick: (tick) => nodes.refresh(tick.overview.nodes) };
}

// ---------- queues ----------

function queuesPage(root) {
  const filter = el("input", { type: "search", placeholder: "Filter by name", id: "queue-filter" });
  const shown = el("span", { class: "muted small" });
  const columns = [
    { key: "name", label: "Name", cell: queueLink },
    { key: "vhost", label: "Vhost" },
    { key: "type", label: "Type", cell: (q) => typeBadge(q.type) },
    { key: "messages_ready", label: "Ready", num: true },
    { key: "messages_unacknowledged", label: "Unacked", num: true },
    { key: "consumers", label: "Consumers", num: true },
    { key: "message_stats.publish_details.rate", label: "Publish / s", num: true, value: (q) => rate(q.message_stats, "publish") },
    { key: "message_stats.deliver_get_details.rate", label: "Deliver / s", num: true, value: (q) => rate(q.message_stats, "deliver_get") },
  ];
  // The broker filters, sorts and pages: the table shows one page of however many queues.
  const wanted = { vhost: state.vhost || undefined, name: "", sort: "name", sort_reverse: false, page: 1, page_size: QUEUES_PAGE_SIZE };
  const ask = (change) => { Object.assign(wanted, change); subscribe(); };
  const list = table(columns, { empty: "No queues match.", id: "queues", onSort: (key, up) => ask({ sort: key, sort_reverse: !up, page: 1 }) });
  const previous = el("button", { class: "secondary", id: "queues-previous", onclick: () => ask({ page: Math.max(1, wanted.page - 1) }) }, "‹");
  const next = el("button", { class: "secondary", id: "queues-next", onclick: () => ask({ page: wanted.page + 1 }) }, "›");
  root.append(
    header("Queues & streams", `${scopeNote("Queues")} Depths and rates update every second.`, ...addQueueForm()),
    el("div", { class: "toolbar" }, filter, shown, previous, next),
    panel(null, list.node),
  );
  filter.addEventListener("input", () => ask({ name: filter.value, page: 1 }));
  return {
    subscription: { queues: wanted },
    tick(tick) {
      const listed = tick.queues;
      if (listed && listed.error) return list.fail(listed.error);
      if (!listed || !listed.items) return;
      list.set(listed.items);
      wanted.page = listed.page;
      previous.disabled = listed.page <= 1;
      next.disabled = listed.page >= listed.page_count;
      previous.hidden = next.hidden = listed.page_count <= 1;
      const of = listed.filtered_count === listed.total_count ? "" : ` (${fmt(listed.total_count)} in all)`;
      const queues = `${fmt(listed.filtered_count)} ${listed.filtered_count === 1 ? "queue" : "queues"}`;
      shown.textContent = listed.page_count > 1 ? `page ${listed.page} of ${listed.page_count}: ${queues}${of}` : `${queues}${of}`;
    },
  };
}

function addQueueForm() {
  const name = el("input", { placeholder: "New queue name", id: "new-queue-name" });
  const vhost = vhostPicker("new-queue-vhost");
  const kind = el("select", { id: "new-queue-type" }, el("option", {}, "classic"), el("option", {}, "quorum"), el("option", {}, "stream"));
  const add = button("Add queue", async () => {
    const queue = required(name, "The new queue's name");
    await api("PUT", `/api/queues/${enc(vhost.value)}/${enc(queue)}`, { durable: true, arguments: { "x-queue-type": kind.value } });
    toast(`Queue ${queue} declared in ${vhost.value}`);
    name.value = "";
  }, { id: "new-queue-add" });
  return [name, vhost, kind, add];
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
  const groups = streamGroups(vhost, name);
  const browseLink = el("a", { href: `#/browse/${enc(vhost)}/${enc(name)}`, class: "hidden", id: "browse-link" }, el("button", { class: "secondary" }, "Browse messages"));
  const purge = button("Purge", async () => {
    if (!confirm(`Purge every ready message of ${name}?`)) return;
    await api("DELETE", `${path}/contents`);
    toast(`${name} purged`);
  }, { id: "purge" });
  const remove = dangerButton("Delete", `Delete queue ${name} and its messages?`, async () => {
    await api("DELETE", path);
    toast(`${name} deleted`);
    location.hash = "#/queues";
  }, "delete-queue");
  // The actions show once the queue is known to be there.
  const actions = el("div", { class: "actions hidden" }, browseLink, purge, remove);
  const title = el("h1", {}, name);
  root.append(
    el("div", { class: "header" }, el("div", {}, title, el("div", { class: "muted" }, `in vhost ${vhost}`)), actions),
    el("div", { class: "grid-2" },
      panel("Depth", depth, el("div", { class: "legend" }, el("span", { style: `--c:${c.deliver}` }, "ready"), el("span", { style: `--c:${c.ack}` }, "unacked"))),
      panel("Details", props, el("h2", { style: "margin-top:18px" }, "Arguments"), argumentsList)),
    groups.node,
    el("div", { class: "grid-2" }, panel("Bindings", bindings.node), panel("Consumers", consumers.node)),
  );
  const depthChart = chart(depth, [{ name: "ready", color: c.deliver }, { name: "unacked", color: c.ack }]);
  let known = false, gone = false, ticks = 0;
  const absent = () => {
    gone = true;
    missing(root, `Queue '${name}' does not exist in vhost '${vhost}'.`);
  };
  api("GET", path).catch((error) => { if (error.status === 404) absent(); });
  const refresh = async () => {
    try {
      bindings.set(await api("GET", `${path}/bindings`));
      const all = await api("GET", `/api/consumers/${enc(vhost)}`);
      consumers.set(all.filter((x) => x.queue.name === name));
    } catch (_) { /* shown by the tick */ }
  };
  refresh();
  const show = (q, at) => {
    known = true;
    actions.classList.remove("hidden");
    depthChart.push(at || Date.now(), [q.messages_ready, q.messages_unacknowledged]);
    // Streams keep their whole log; a durable classic queue's log holds its persistent
    // messages until their segment is reclaimed.
    browseLink.classList.toggle("hidden", !(q.type === "stream" || (q.type === "classic" && q.durable && !q.exclusive)));
    purge.classList.toggle("hidden", q.type === "stream");
    groups.show(q.type === "stream");
    props.replaceChildren(...queueProps(q).flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
    const args = Object.entries(q.arguments || {});
    argumentsList.replaceChildren(...(args.length ? args.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { class: "mono" }, JSON.stringify(v))]) : [el("dd", { class: "muted" }, "none")]));
  };
  return {
    subscription: { queue: { vhost, name } },
    refresh,
    tick(tick) {
      if (gone) return;
      // Consumers come and go without a connection coming or going: read again now and then.
      if (++ticks % 5 === 0) refresh();
      const q = tick.queue;
      if (q && q.name === name && q.vhost === vhost) return show(q, tick.at_ms);
      // Deleted while shown (a tick of an earlier subscription names another queue).
      if (known && tick.subscribed_queue === name && !q) absent();
    },
    leave: groups.leave,
  };
}

function queueProps(q) {
  return [["Type", typeBadge(q.type)], ["Durable", q.durable ? "yes" : "no"], ["Ready", fmt(q.messages_ready)], ["Unacked", fmt(q.messages_unacknowledged)],
    ["Consumers", fmt(q.consumers)], ["Publish / s", fmt(rate(q.message_stats, "publish"))], ["Deliver / s", fmt(rate(q.message_stats, "deliver_get"))],
    ["Node", q.node], ...(q.leader ? [["Leader", q.leader], ["Members", q.members.join(", ")]] : []),
    ["Policy", q.policy || "none"], ...(q.operator_policy ? [["Operator policy", q.operator_policy]] : []),
    ...(q.policy || q.operator_policy ? [["Effective policy", el("span", { class: "mono" }, JSON.stringify(q.effective_policy_definition))]] : [])];
}

// ---------- a stream's consumer groups ----------

function groupConsumers(g) {
  if (!g.consumers || !g.consumers.length) return el("span", { class: "muted" }, "none attached");
  return el("div", { class: "small" }, ...g.consumers.map((x) => el("div", {},
    el("span", { class: `badge ${x.active ? "active" : ""}` }, x.active ? "active" : "waiting"), " ",
    x.consumer_tag, x.channel_details ? ` on ${x.channel_details.connection_name}` : "", ` · delivered up to ${fmt(x.offset)}`)));
}

// The consumer groups of stream `name` and their lag, read again every second while shown.
function streamGroups(vhost, name) {
  const list = table([
    { key: "group", label: "Group" },
    { key: "partition", label: "Partition", value: (g) => (g.partition === null || g.partition === undefined ? "–" : `${g.partition} (${g.stream})`) },
    { key: "committed_offset", label: "Committed", num: true },
    { key: "last_offset", label: "Last", num: true },
    { key: "offset_lag", label: "Lag", num: true },
    { key: "members", label: "Consumers", value: (g) => (g.consumers || []).length, cell: groupConsumers },
  ], { empty: "No consumer groups.", id: "stream-groups" });
  const node = el("div", { class: "panel hidden", id: "stream-groups-panel" }, el("h2", {}, "Consumer groups"),
    el("div", { class: "muted small" }, "Consumers with x-consumer-group share a committed offset; the lag is what the group has yet to acknowledge."), list.node);
  let timer = null, reading = false;
  const read = async () => {
    if (reading) return;
    reading = true;
    try {
      list.set(await api("GET", `/api/stream/groups/${enc(vhost)}/${enc(name)}`));
    } catch (error) {
      // A broker without the route lists none.
      if (error.status === 404) list.set([]); else list.fail(error.message);
    } finally { reading = false; }
  };
  return {
    node,
    show(isStream) {
      node.classList.toggle("hidden", !isStream);
      if (isStream && !timer) { read(); timer = setInterval(read, 1000); }
    },
    leave() { clearInterval(timer); timer = null; },
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
  const skipped = el("span", { class: "skipped", id: "browse-skipped" });
  const list = el("div", { class: "messages", id: "browse-messages" });
  root.append(
    header(`Browse ${name}`, "Reading by offset never consumes a message.",
      el("a", { href: `#/queue/${enc(vhost)}/${enc(name)}` }, el("button", { class: "secondary" }, "Back to queue"))),
    // The toolbars stay in view while a long page scrolls (and while following).
    el("div", { class: "sticky-tools", id: "browse-tools" },
      el("div", { class: "toolbar" }, "Start at", start, at, tag, size, open),
      el("div", { class: "toolbar" }, prev, next, tail, where, skipped)),
    panel(null, list),
  );
  let view = { first: 0, next: 0, begin: 0, end: 0 };
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
    where.textContent = `offsets ${fmt(view.first)}–${fmt(Math.max(view.first, view.end - 1))} held; next ${fmt(view.next)}`;
    prev.disabled = view.begin <= view.first;
    next.disabled = view.next >= view.end;
  };
  const request = (query) => ({ vhost, queue: name, count: count(), filter: tag.value || undefined, ...query });
  const read = (query) => browse(request(query)).then((a) => show(a, false));
  const startQuery = () => {
    if (start.value === "offset") return { offset: String(Number(at.value) || 0) };
    if (start.value === "timestamp") return { timestamp: Date.parse(at.value) || Date.now() };
    return { offset: start.value };
  };
  const follow = following(request, () => view.next, (answer) => {
    if (answer.error || !answer.skipped) return show(answer, !answer.error && list.querySelector(".message") !== null);
    show(answer, false);
    skipped.textContent = `jumped to the newest: skipped ${fmt(answer.skipped)} messages`;
  }, list);
  open.onclick = () => read(startQuery());
  next.onclick = () => read({ offset: String(view.next) });
  prev.onclick = () => read({ offset: String(Math.max(view.first, view.begin - count())) });
  tail.onclick = () => {
    const on = follow.toggle();
    tail.textContent = on ? "Stop following" : "Follow live";
    if (!on) skipped.textContent = "";
  };
  read({ offset: "first" });
  return { tick: follow.tick, leave: follow.stop };
}

// "Follow live": each tick reads the stream's tail over the feed (offset `tail`, from where the
// page got to): what came since if it fits a page, else the newest page, with how many
// messages were jumped over. One read at a time, however slow the answers.
function following(request, since, shown, list) {
  let on = false, reading = false;
  const tick = async () => {
    if (!on || reading) return;
    reading = true;
    try {
      const answer = await browse(request({ offset: "tail", since: since() }));
      if (!on) return;
      shown(answer);
      const newest = list.lastElementChild;
      if (newest) newest.scrollIntoView({ block: "end" });
    } finally { reading = false; }
  };
  return {
    tick,
    toggle() { on = !on; if (on) tick(); return on; },
    stop() { on = false; },
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

function exchangeLink(x) {
  return el("a", { href: `#/exchange/${enc(x.vhost)}/${enc(x.name || "amq.default")}` }, x.name || "(default exchange)");
}

function exchangesPage(root) {
  const list = table([
    { key: "name", label: "Name", cell: exchangeLink },
    { key: "vhost", label: "Vhost" },
    { key: "type", label: "Type" },
    { key: "durable", label: "Durable", value: (x) => (x.durable ? "yes" : "no") },
    { key: "arguments", label: "Arguments", value: (x) => JSON.stringify(x.arguments) },
  ], { id: "exchanges" });
  root.append(header("Exchanges", scopeNote("Exchanges")), panel(null, list.node));
  const refresh = () => fill(list, vhostScoped("/api/exchanges"));
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
  const props = el("dl", { class: "props" });
  const publish = form("publish-form", [["Routing key", key], ["Headers (JSON)", headers], ["Persistent", persistent], ["Payload", payload]], "Publish message", async () => {
    const properties = { delivery_mode: persistent.checked ? 2 : 1 };
    if (headers.value) properties.headers = parseJson(headers.value, "The headers");
    const answer = await api("POST", `/api/exchanges/${enc(vhost)}/${enc(name)}/publish`,
      { routing_key: key.value, payload: payload.value, payload_encoding: "string", properties });
    toast(answer.routed ? "Published and routed" : "Published, but no queue took it", !answer.routed);
  });
  root.append(
    header(name === "amq.default" ? "(default exchange)" : name, `in vhost ${vhost}`),
    el("div", { class: "grid-2" }, panel("Publish", publish), el("div", {}, panel("Details", props), panel("Bindings", bindings.node))),
  );
  api("GET", `/api/exchanges/${enc(vhost)}/${enc(name)}`).then((x) => {
    const rows = [["Type", x.type], ["Durable", x.durable ? "yes" : "no"], ["Auto-delete", x.auto_delete ? "yes" : "no"], ["Arguments", JSON.stringify(x.arguments || {})]];
    props.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
  }, (error) => {
    if (error.status === 404) missing(root, `Exchange '${name}' does not exist in vhost '${vhost}'.`);
  });
  if (name !== "amq.default") api("GET", `/api/exchanges/${enc(vhost)}/${enc(name)}/bindings/source`).then(bindings.set, () => {});
  return {};
}

// `text` as JSON, or an error naming `what` was not.
function parseJson(text, what) {
  try { return JSON.parse(text); } catch (error) { throw new Error(`${what} must be JSON: ${error.message}`); }
}

// ---------- users ----------

function usersPage(root) {
  const name = input("user-name", { placeholder: "name", autocomplete: "off" });
  const password = input("user-password", { type: "password", placeholder: "password", autocomplete: "new-password" });
  const tags = input("user-tags", { placeholder: KNOWN_TAGS.slice(0, 3).join(", "), list: "known-tags" });
  const list = table([
    { key: "name", label: "Name", cell: (u) => el("a", { href: `#/user/${enc(u.name)}` }, u.name) },
    { key: "tags", label: "Tags", value: (u) => [].concat(u.tags).join(","), cell: (u) => tagsView(u.tags) },
    { key: "password_hash", label: "Password", value: (u) => (u.password_hash ? "set" : "none (cannot log in with one)") },
    { key: "limits", label: "Limits", value: (u) => (u.limits && Object.keys(u.limits).length ? JSON.stringify(u.limits) : "–") },
    { key: "action", label: "", cell: (u) => dangerButton("Delete", `Delete user ${u.name}? Its connections are closed.`, async () => {
      await api("DELETE", `/api/users/${enc(u.name)}`);
      toast(`User ${u.name} deleted`);
      refresh();
    }) },
  ], { empty: "No users.", id: "users" });
  const add = form("user-form", [["Name", name], ["Password", password], ["Tags", tags]], "Add user", async () => {
    const user = required(name, "The user's name");
    const body = { password: required(password, "A password for the new user"), tags: parseTags(tags.value) };
    await api("PUT", `/api/users/${enc(user)}`, body);
    toast(`User ${user} saved`);
    name.value = password.value = tags.value = "";
    refresh();
  });
  root.append(header("Users", `Who may connect and log in. Tags: ${KNOWN_TAGS.join(", ")}.`), tagHints(),
    el("div", { class: "grid-2" }, panel("Add a user", add), panel("Users", list.node)));
  const refresh = () => fill(list, "/api/users");
  refresh();
  return {};
}

function tagHints() {
  return el("datalist", { id: "known-tags" }, ...KNOWN_TAGS.map((t) => el("option", { value: t })));
}

function userPage(root, name) {
  const path = `/api/users/${enc(name)}`;
  const tags = input("user-tags-edit", { placeholder: "no tags", list: "known-tags" });
  const password = input("user-new-password", { type: "password", autocomplete: "new-password" });
  const props = el("dl", { class: "props", id: "user-props" });
  const permissions = table(permissionColumns(false), { empty: "No permissions in any vhost.", id: "user-permissions" });
  const tagForm = form("user-tags-form", [["Tags", tags]], "Save tags", async () => {
    await api("PUT", path, { tags: parseTags(tags.value) });
    toast(`Tags of ${name} saved`);
    load();
  });
  const passwordForm = form("user-password-form", [["New password", password]], "Change password", async () => {
    await api("PUT", path, { password: required(password, "The new password") });
    password.value = "";
    toast(`Password of ${name} changed`);
  });
  const remove = dangerButton("Delete user", `Delete user ${name}? Its connections are closed.`, async () => {
    await api("DELETE", path);
    toast(`User ${name} deleted`);
    location.hash = "#/users";
  }, "delete-user");
  root.append(header(`User ${name}`, "Its tags, password and permissions.", remove), tagHints(),
    el("div", { class: "grid-2" }, panel("Details", props, el("h2", { style: "margin-top:18px" }, "Tags"), tagForm, el("h2", { style: "margin-top:18px" }, "Password"), passwordForm),
      panel("Permissions", permissions.node, el("div", { class: "small" }, el("a", { href: "#/permissions" }, "Set or clear permissions")))));
  const load = async () => {
    try {
      const user = await api("GET", path);
      tags.value = [].concat(user.tags).join(", ");
      props.replaceChildren(el("dt", {}, "Tags"), el("dd", { "data-field": "Tags" }, tagsView(user.tags)),
        el("dt", {}, "Password"), el("dd", {}, user.password_hash ? `set (${user.hashing_algorithm})` : "none"));
      fill(permissions, `${path}/permissions`);
    } catch (error) {
      if (error.status === 404) missing(root, `User '${name}' does not exist.`); else toast(error.message, true);
    }
  };
  load();
  return {};
}

// ---------- virtual hosts ----------

const LIMITS = ["max-connections", "max-queues"];

function limitsOf(all, vhost) {
  const found = (all || []).find((entry) => entry.vhost === vhost);
  return (found && found.value) || {};
}

function vhostsPage(root) {
  const name = input("vhost-name", { placeholder: "name", autocomplete: "off" });
  const description = input("vhost-description", { placeholder: "what it is for" });
  let limits = [];
  const limitColumn = (limit) => ({ key: limit, label: limit, num: true, value: (v) => limitsOf(limits, v.name)[limit] ?? "–" });
  const list = table([
    { key: "name", label: "Name", cell: (v) => vhostLink(v.name) },
    { key: "description", label: "Description" },
    { key: "messages", label: "Messages", num: true },
    { key: "messages_ready", label: "Ready", num: true },
    { key: "messages_unacknowledged", label: "Unacked", num: true },
    ...LIMITS.map(limitColumn),
    { key: "action", label: "", cell: (v) => dangerButton("Delete", `Delete vhost ${v.name} with every queue, exchange and message in it?`, async () => {
      await deleteVhost(v.name);
      refresh();
    }) },
  ], { empty: "No virtual hosts.", id: "vhosts" });
  const add = form("vhost-form", [["Name", name], ["Description", description]], "Add virtual host", async () => {
    const vhost = required(name, "The virtual host's name");
    await api("PUT", `/api/vhosts/${enc(vhost)}`, { description: description.value });
    toast(`Virtual host ${vhost} saved`);
    name.value = description.value = "";
    await loadVhosts();
    refresh();
  });
  root.append(header("Virtual hosts", "Each has its own queues, exchanges, permissions and policies."),
    el("div", { class: "grid-2" }, panel("Add a virtual host", add), panel("Virtual hosts", list.node)));
  const refresh = async () => {
    limits = await api("GET", "/api/vhost-limits").catch(() => []);
    fill(list, "/api/vhosts");
  };
  refresh();
  return {};
}

async function deleteVhost(name) {
  await api("DELETE", `/api/vhosts/${enc(name)}`);
  toast(`Virtual host ${name} deleted`);
  await loadVhosts();
}

// A limit typed in a form: a whole number, or null (none) when empty.
function limitValue(field, limit) {
  const text = field.value.trim();
  if (text === "") return null;
  if (!/^-?\d+$/.test(text)) throw new Error(`${limit} must be a whole number (empty or negative for no limit), not '${text}'`);
  return Number(text);
}

function vhostPage(root, name) {
  const path = `/api/vhosts/${enc(name)}`;
  const props = el("dl", { class: "props", id: "vhost-props" });
  const fields = Object.fromEntries(LIMITS.map((limit) => [limit, input(`limit-${limit}`, { placeholder: "no limit", inputmode: "numeric" })]));
  const permissions = table(permissionColumns(true), { empty: "No user has permissions here.", id: "vhost-permissions" });
  let current = {};
  const limitsForm = form("vhost-limits-form", LIMITS.map((limit) => [limit, fields[limit]]), "Save limits", async () => {
    for (const limit of LIMITS) {
      const value = limitValue(fields[limit], limit);
      if (value !== null && value >= 0) await api("PUT", `/api/vhost-limits/${enc(name)}/${limit}`, { value });
      else if (current[limit] !== undefined) await api("DELETE", `/api/vhost-limits/${enc(name)}/${limit}`);
    }
    toast(`Limits of ${name} saved`);
    load();
  });
  const remove = dangerButton("Delete virtual host", `Delete vhost ${name} with every queue, exchange and message in it?`, async () => {
    await deleteVhost(name);
    location.hash = "#/vhosts";
  }, "delete-vhost");
  root.append(header(`Virtual host ${name}`, "Its limits and who may use it.", remove),
    el("div", { class: "grid-2" }, panel("Details", props, el("h2", { style: "margin-top:18px" }, "Limits"), limitsForm),
      panel("Permissions", permissions.node, el("div", { class: "small" }, el("a", { href: "#/permissions" }, "Set or clear permissions")))));
  const load = async () => {
    try {
      const vhost = await api("GET", path);
      current = limitsOf(await api("GET", `/api/vhost-limits/${enc(name)}`), name);
      for (const limit of LIMITS) fields[limit].value = current[limit] ?? "";
      const shown = LIMITS.map((limit) => `${limit}: ${current[limit] ?? "none"}`).join(", ");
      props.replaceChildren(el("dt", {}, "Description"), el("dd", {}, vhost.description || "–"),
        el("dt", {}, "Messages"), el("dd", {}, fmt(vhost.messages)), el("dt", {}, "Limits"), el("dd", { "data-field": "Limits" }, shown));
      fill(permissions, `${path}/permissions`);
    } catch (error) {
      if (error.status === 404) missing(root, `Virtual host '${name}' does not exist.`); else toast(error.message, true);
    }
  };
  load();
  return {};
}

// ---------- permissions ----------

function permissionColumns(withUser) {
  const regex = (key) => ({ key, label: key, cell: (p) => el("span", { class: "mono" }, p[key] === "" ? "(none)" : p[key]) });
  return [withUser ? { key: "user", label: "User", cell: (p) => el("a", { href: `#/user/${enc(p.user)}` }, p.user) } : { key: "vhost", label: "Vhost", cell: (p) => vhostLink(p.vhost) },
    regex("configure"), regex("write"), regex("read")];
}

// Pickers of a user (from /api/users) and a vhost for a permission form.
function userPicker(id) {
  const picker = el("select", { id });
  api("GET", "/api/users").then((users) => picker.replaceChildren(...users.map((u) => el("option", { value: u.name }, u.name))), () => {});
  return picker;
}

function pattern(id, value = ".*") {
  return input(id, { value, class: "mono" });
}

function permissionsPage(root) {
  const [user, vhost] = [userPicker("permission-user"), vhostPicker("permission-vhost")];
  const [configure, write, read] = ["configure", "write", "read"].map((key) => pattern(`permission-${key}`));
  const list = table([
    { key: "user", label: "User", cell: (p) => el("a", { href: `#/user/${enc(p.user)}` }, p.user) },
    { key: "vhost", label: "Vhost", cell: (p) => vhostLink(p.vhost) },
    ...permissionColumns(true).slice(1),
    { key: "action", label: "", cell: (p) => button("Clear", async () => {
      await api("DELETE", `/api/permissions/${enc(p.vhost)}/${enc(p.user)}`);
      toast(`Permissions of ${p.user} in ${p.vhost} cleared`);
      refresh();
    }, { class: "danger" }) },
  ], { empty: "No permissions.", id: "permissions" });
  const set = form("permission-form", [["User", user], ["Virtual host", vhost], ["Configure", configure], ["Write", write], ["Read", read]], "Set permission", async () => {
    if (!user.value) throw new Error("Choose a user (only administrators see them)");
    await api("PUT", `/api/permissions/${enc(vhost.value)}/${enc(user.value)}`, { configure: configure.value, write: write.value, read: read.value });
    toast(`Permissions of ${user.value} in ${vhost.value} set`);
    refresh();
  });
  root.append(header("Permissions", `${scopeNote("Permissions")} Each is three regular expressions over resource names; an empty one allows nothing.`),
    el("div", { class: "grid-2" }, panel("Set a permission", set), panel("Permissions", list.node)));
  const refresh = () => fill(list, state.vhost ? `/api/vhosts/${enc(state.vhost)}/permissions` : "/api/permissions");
  refresh();
  return {};
}

function topicPermissionsPage(root) {
  const [user, vhost] = [userPicker("topic-user"), vhostPicker("topic-vhost")];
  const exchange = input("topic-exchange", { value: "amq.topic" });
  const [write, read] = ["write", "read"].map((key) => pattern(`topic-${key}`));
  const list = table([
    { key: "user", label: "User", cell: (p) => el("a", { href: `#/user/${enc(p.user)}` }, p.user) },
    { key: "vhost", label: "Vhost", cell: (p) => vhostLink(p.vhost) },
    { key: "exchange", label: "Exchange" },
    ...permissionColumns(true).slice(2),
    { key: "action", label: "", cell: (p) => button("Clear", async () => {
      await api("DELETE", `/api/topic-permissions/${enc(p.vhost)}/${enc(p.user)}/${enc(p.exchange)}`);
      toast(`Topic permission of ${p.user} on ${p.exchange} cleared`);
      refresh();
    }, { class: "danger" }) },
  ], { empty: "No topic permissions.", id: "topic-permissions" });
  const set = form("topic-form", [["User", user], ["Virtual host", vhost], ["Exchange", exchange], ["Write", write], ["Read", read]], "Set topic permission", async () => {
    if (!user.value) throw new Error("Choose a user (only administrators see them)");
    const body = { exchange: required(exchange, "The topic exchange"), write: write.value, read: read.value };
    await api("PUT", `/api/topic-permissions/${enc(vhost.value)}/${enc(user.value)}`, body);
    toast(`Topic permission of ${user.value} on ${body.exchange} set`);
    refresh();
  });
  root.append(header("Topic permissions", `${scopeNote("Topic permissions")} Regular expressions over the routing keys a user may publish with (write) or bind with (read) on a topic exchange.`),
    el("div", { class: "grid-2" }, panel("Set a topic permission", set), panel("Topic permissions", list.node)));
  const refresh = () => fill(list, state.vhost ? `/api/vhosts/${enc(state.vhost)}/topic-permissions` : "/api/topic-permissions");
  refresh();
  return {};
}

// ---------- policies ----------

// Policies and operator policies: listed, added or replaced (the form; a row's Edit fills it),
// deleted. Which keys change nothing in Warren is shown beside each definition.
function policiesPage(root) {
  const kind = el("select", { id: "policy-kind" }, el("option", { value: "policies" }, "policy"), el("option", { value: "operator-policies" }, "operator policy"));
  const vhost = vhostPicker("policy-vhost");
  const name = input("policy-name", { placeholder: "name" });
  const pattern = input("policy-pattern", { placeholder: "^orders\\." });
  const applyTo = el("select", { id: "policy-apply-to" }, ...["all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"].map((v) => el("option", { value: v }, v)));
  const priority = input("policy-priority", { type: "number", value: "0" });
  const definition = el("textarea", { id: "policy-definition", placeholder: '{"message-ttl": 60000, "max-length": 10000}' });
  const edit = (base, p) => {
    kind.value = base; vhost.value = p.vhost; name.value = p.name; pattern.value = p.pattern;
    applyTo.value = p["apply-to"]; priority.value = p.priority; definition.value = JSON.stringify(p.definition);
  };
  const columns = (base) => [
    { key: "vhost", label: "Vhost" },
    { key: "name", label: "Name" },
    { key: "pattern", label: "Pattern", cell: (p) => el("span", { class: "mono" }, p.pattern) },
    { key: "apply-to", label: "Apply to" },
    { key: "priority", label: "Priority", num: true },
    { key: "definition", label: "Definition", value: (p) => JSON.stringify(p.definition), cell: (p) => el("span", { class: "mono" }, JSON.stringify(p.definition)) },
    { key: "no_effect", label: "No effect in Warren", value: (p) => Object.keys(p.no_effect || {}).join(", ") },
    { key: "action", label: "", cell: (p) => el("span", {}, button("Edit", () => edit(base, p)),
      dangerButton("Delete", `Delete ${base === "policies" ? "policy" : "operator policy"} ${p.name}?`, async () => {
        await api("DELETE", `/api/${base}/${enc(p.vhost)}/${enc(p.name)}`);
        toast(`${p.name} deleted`);
        refresh();
      })) },
  ];
  const policies = table(columns("policies"), { sort: "priority", empty: "No policies." });
  const operatorPolicies = table(columns("operator-policies"), { sort: "priority", empty: "No operator policies." });
  const save = form("policy-form", [["Kind", kind], ["Vhost", vhost], ["Name", name], ["Pattern", pattern], ["Apply to", applyTo], ["Priority", priority], ["Definition (JSON)", definition]], "Save policy", async () => {
    const body = { pattern: required(pattern, "The pattern"), definition: parseJson(definition.value || "{}", "The definition"), priority: Number(priority.value || 0), "apply-to": applyTo.value };
    const policy = required(name, "The policy's name");
    await api("PUT", `/api/${kind.value}/${enc(vhost.value)}/${enc(policy)}`, body);
    toast(`${policy} saved`);
    refresh();
  });
  root.append(
    header("Policies", `${scopeNote("Policies")} Queues and exchanges whose names a pattern matches run with its definition; the highest priority wins.`),
    panel("Add or replace", save),
    el("div", { class: "panel", id: "policies" }, el("h2", {}, "Policies"), policies.node),
    el("div", { class: "panel", id: "operator-policies" }, el("h2", {}, "Operator policies"), operatorPolicies.node),
  );
  const refresh = () => Promise.all([fill(policies, vhostScoped("/api/policies")), fill(operatorPolicies, vhostScoped("/api/operator-policies"))]);
  refresh();
  return {};
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
  return button("Close", async () => {
    const reason = prompt("Close this connection. The client is told:", "Closed by an operator");
    if (reason === null) return;
    await api("DELETE", `/api/connections/${enc(row.name)}`, undefined, { "X-Reason": reason });
    toast("Connection closed");
  }, { class: "danger" });
}

const channelColumns = [
  { key: "name", label: "Channel" },
  { key: "user", label: "User" },
  { key: "vhost", label: "Vhost" },
  { key: "prefetch_count", label: "Prefetch", num: true },
  { key: "consumer_count", label: "Consumers", num: true },
  { key: "messages_unacknowledged", label: "Unacked", num: true },
];

const consumerColumns = [
  { key: "consumer_tag", label: "Tag" },
  { key: "queue", label: "Queue", value: (x) => x.queue.name, cell: (x) => queueLink(x.queue) },
  { key: "vhost", label: "Vhost", value: (x) => x.queue.vhost },
  { key: "channel", label: "Channel", value: (x) => x.channel_details.name },
  { key: "ack_required", label: "Ack", value: (x) => (x.ack_required ? "yes" : "no") },
  { key: "prefetch_count", label: "Prefetch", num: true },
];

// A list read from `path()`, kept to the chosen vhost (connections and channels have no
// per-vhost route: they are kept here).
function listPage(root, title, path, columns, action) {
  const all = action ? [...columns, { key: "action", label: "", cell: action }] : columns;
  const list = table(all, { empty: `No ${title.toLowerCase()} on this node.`, id: title.toLowerCase() });
  const vhostOf = (row) => (row.queue ? row.queue.vhost : row.vhost);
  root.append(header(title, scopeNote(title)), panel(null, list.node));
  const refresh = () => fill(list, path(), (rows) => inVhost(rows, vhostOf));
  refresh();
  return { refresh };
}

start();
