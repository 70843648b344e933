// The session page's platform panel: what the agents API (Pipecat Cloud, or the dashboard's built-in
// copy) says of this session — how it completed, whether it cold-started, its deployment, CPU and
// memory, and its log lines — as the server joined them (GET /api/sessions/<id>/platform/).
// Rendered as given, as text; fetched after the page has loaded and again every 30 s, since the
// platform's record changes when the session ends. Hidden while the agents API does not know it.
import { clockTime, formatDuration, shortId } from "./format.js";

const section = document.getElementById("platform");
const EVERY_MS = 30000;
const $ = (id) => document.getElementById(id);

function megabytes(bytes) {
  return typeof bytes === "number" ? `${(bytes / 1e6).toFixed(0)} MB` : "—";
}

function millicores(value) {
  return typeof value === "number" ? `${value.toFixed(0)} m` : "—";
}

function completion(record) {
  if (!record.completionStatus) return record.endedAt ? "—" : "active";
  const took = typeof record.durationSeconds === "number" ? ` after ${formatDuration(record.durationSeconds * 1000)}` : "";
  return `${record.completionStatus}${record.failed ? " (failed)" : ""}${took}`;
}

function start(record) {
  const kind = record.coldStart === true ? "cold start" : record.coldStart === false ? "warm start" : "start";
  const bot = typeof record.botStartSeconds === "number" ? `, bot ready in ${formatDuration(record.botStartSeconds * 1000)}` : "";
  return record.coldStart === null && !bot ? "—" : `${kind}${bot}`;
}

function logLine(line) {
  const li = document.createElement("li");
  li.className = `log-${(line.level || "plain").toLowerCase()}`;
  const time = document.createElement("time");
  time.title = line.timestamp || "";
  const when = line.timestamp ? new Date(line.timestamp) : null;
  // One session's lines span minutes: the time of day to the millisecond, the full stamp on hover.
  time.textContent =
    when && !Number.isNaN(when.getTime())
      ? `${clockTime(when).replace(/ /, `.${String(when.getMilliseconds()).padStart(3, "0")} `)}`
      : line.timestamp || "";
  const text = document.createElement("span");
  text.className = "log-text";
  text.textContent = line.log;
  li.append(time, " ", text);
  return li;
}

function render(platform) {
  const record = platform.session;
  const error = platform.error
    ? `${record ? `Showing what the agents API said ${Math.round(platform.ageSeconds)} s ago; it failed since: ` : "The agents API could not be asked: "}${platform.error}`
    : "";
  $("platform-error").textContent = error;
  $("platform-error").hidden = !error;
  $("platform-completion").textContent = record ? completion(record) : "—";
  $("platform-completion").classList.toggle("failed-text", Boolean(record?.failed));
  $("platform-start").textContent = record ? start(record) : "—";
  $("platform-deployment").textContent = shortId(record?.deploymentId); // a UUID by its first 8 characters
  $("platform-deployment").title = record?.deploymentId || "";
  const metrics = record?.resourceMetrics;
  $("platform-cpu").textContent = metrics ? `${millicores(metrics.cpuMillicoresP50)} / ${millicores(metrics.cpuMillicoresP95)}` : "—";
  $("platform-memory").textContent = metrics ? `${megabytes(metrics.memoryBytesP50)} / ${megabytes(metrics.memoryBytesP95)}` : "—";
  const logs = platform.logs || [];
  $("platform-logs-count").textContent =
    platform.logsError ? `(could not be fetched: ${platform.logsError})`
    : platform.logsTotal === null ? "" : `(${logs.length} of ${platform.logsTotal})`;
  const link = $("platform-logs-link");
  if (section.dataset.logsUrl) {
    link.href = section.dataset.logsUrl;
    link.hidden = false;
  }
  const list = section.querySelector("ol.log-lines");
  list.replaceChildren(...logs.map(logLine));
  section.hidden = false;
}

async function refresh() {
  try {
    const response = await fetch(section.dataset.url, { credentials: "same-origin" });
    if (!response.ok) return;
    const { platform } = await response.json();
    if (platform) render(platform);
  } catch (error) {
    console.error("platform", error);
  }
}

refresh();
setInterval(refresh, EVERY_MS);
