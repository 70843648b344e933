// Unit tests for static/js/format.js (node --test tests/js/): the product's time and duration formats
// and short ids. tests/web/test_format.py runs formatDuration and shortId on the same tables of cases as
// the server's dashboard/display.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import { absoluteTime, clockTime, formatDuration, relativeTime, shortId, showTime, upgradeTimes } from "../../static/js/format.js";

const PARIS = { timeZone: "Europe/Paris", locale: "en-GB" };
const NEW_YORK = { timeZone: "America/New_York", locale: "en-US" };
const UTC = { timeZone: "UTC", locale: "en-US" };
const MOMENT = new Date("2026-11-23T13:03:07Z");

test("an absolute time is 24-hour, in the operator's zone, the zone named", () => {
  assert.equal(absoluteTime(MOMENT, PARIS), "2026-11-23 14:03:07 CET");
  assert.equal(absoluteTime(MOMENT, NEW_YORK), "2026-11-23 08:03:07 EST");
  assert.equal(absoluteTime(MOMENT, UTC), "2026-11-23 13:03:07 UTC");
  // Midnight is 00, never 24 or 12 AM, and the date is the zone's own.
  assert.equal(absoluteTime(new Date("2026-11-23T23:30:00Z"), PARIS), "2026-11-24 00:30:00 CET");
  assert.equal(absoluteTime(new Date("2026-07-01T12:00:00Z"), PARIS), "2026-07-01 14:00:00 CEST");
  assert.equal(clockTime(MOMENT, NEW_YORK), "08:03:07 EST");
  assert.equal(absoluteTime(new Date("nonsense")), "?");
  assert.equal(clockTime(new Date("nonsense")), "?");
  // The browser's own zone when none is given.
  assert.match(absoluteTime(MOMENT), /^2026-11-2[34] \d\d:\d\d:07 \S+$/);
});

test("a relative time says how long ago, then the date with its zone", () => {
  const now = MOMENT.getTime();
  const ago = (seconds) => relativeTime(new Date(now - seconds * 1000), now, PARIS);
  const cases = [
    [0, "just now"],
    [9.9, "just now"],
    [10, "10 s ago"],
    [59.9, "59 s ago"],
    [60, "1 min ago"],
    [245, "4 min ago"],
    [3599, "59 min ago"],
    [3600, "1 h ago"],
    [3 * 3600 + 59 * 60, "3 h ago"],
    [86399, "23 h ago"],
    [86400, "2026-11-22 14:03 CET"],
    [40 * 86400, "2026-10-14 15:03 CEST"], // a summer-time date, in summer time, so named
    [-30, "just now"], // the browser's clock a little behind the server's
    [-61, "2026-11-23 14:04 CET"], // a time in the future is not clock skew: its date, the zone named
  ];
  for (const [seconds, text] of cases) assert.equal(ago(seconds), text, `${seconds} s ago`);
  assert.equal(relativeTime(new Date("nonsense"), now), "?");
});

test("showTime and upgradeTimes fill <time class=when>: how long ago, the full time on hover", () => {
  const element = (datetime, text) => ({ textContent: text, title: "server's", getAttribute: (name) => (name === "datetime" ? datetime : null) });
  const now = MOMENT.getTime();
  const recent = element("2026-11-23T13:03:00+00:00", "2026-11-23 13:03:00 UTC");
  showTime(recent, now);
  assert.equal(recent.textContent, "just now");
  assert.equal(recent.title, absoluteTime(new Date("2026-11-23T13:03:00Z")));
  // Unreadable: the server's UTC text stays.
  const broken = element("yesterday", "2026-11-22 10:00:00 UTC");
  showTime(broken, now);
  assert.deepEqual([broken.textContent, broken.title], ["2026-11-22 10:00:00 UTC", "server's"]);
  // The whole page, again later: "just now" ages.
  const times = [element("2026-11-23T13:03:07Z", ""), element("2026-11-23T12:03:07.123456+00:00", "")];
  const asked = [];
  const root = {
    querySelectorAll(selector) {
      asked.push(selector);
      return times;
    },
  };
  upgradeTimes(root, now + 15_000);
  assert.deepEqual(asked, ["time.when"]);
  assert.deepEqual(times.map((t) => t.textContent), ["15 s ago", "1 h ago"]);
});

test("durations are rounded as a person says them", () => {
  // The whole table, shared with the server's filter, is in tests/web/test_format.py; these are its landmarks.
  const cases = [
    [0, "0 ms"],
    [380.491, "380 ms"],
    [999.4, "999 ms"],
    [999.5, "1.0 s"],
    [1234, "1.2 s"],
    [9949, "9.9 s"],
    [9950, "10 s"],
    [12_345, "12 s"],
    [59_499, "59 s"],
    [59_500, "1 min 00 s"],
    [245_000, "4 min 05 s"],
    [3_599_499, "59 min 59 s"],
    [3_599_500, "1 h 00 min"],
    [3_720_000, "1 h 02 min"],
    [-5, "0 ms"],
  ];
  for (const [ms, text] of cases) assert.equal(formatDuration(ms), text, `${ms} ms`);
  for (const unknown of [null, undefined, Number.NaN, Number.POSITIVE_INFINITY, "12"]) assert.equal(formatDuration(unknown), "—");
});

test("UUIDs and long hex ids read by their first 8 characters; ids a person chose, whole", () => {
  assert.equal(shortId("4cab03c7-8f53-4e1b-9a0d-2f6c1e7b5a90"), "4cab03c7");
  assert.equal(shortId("4CAB03C78F534E1B9A0D2F6C1E7B5A90"), "4CAB03C7");
  assert.equal(shortId("demo-3fa9c2d1e0b4"), "demo-3fa9c2d1e0b4");
  assert.equal(shortId("4cab03c7-8f53"), "4cab03c7-8f53"); // not a UUID: somebody's name for it
  assert.equal(shortId(null), "—");
  assert.equal(shortId(""), "—");
});
