// The pages' code in small units (node --test tests/js/): no function in static/js spans more than
// MAX_LINES lines, from the line it begins on to the line it ends on, inner functions included. A closure
// that holds a whole feature is one unit however its parts are named: split it into modules instead.
//
// No parser is installed, so this reads the code with a small tokenizer: strings, template literals,
// comments and regular expressions are skipped, brackets matched, and these are functions:
// `function` declarations and expressions, methods (`name(...) {`, getters, setters), and arrows, with a
// block body or an expression one.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const MAX_LINES = 80;
const ROOT = fileURLToPath(new URL("../../static/js/", import.meta.url));

const CONTROL = new Set(["if", "for", "while", "switch", "catch", "with", "return", "typeof", "await", "new"]);
// After these a `/` starts a regular expression, not a division.
const BEFORE_REGEX = new Set(["return", "typeof", "case", "do", "else", "in", "of", "new", "delete", "void", "throw", "yield", "await"]);
const PUNCTUATORS = ["=>", "...", "?.", "??=", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "==", "!=", "<=", ">=", "&&", "||", "??", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "**", "<<", ">>"];

/** The code as tokens: {type: "name" | "punct" | "literal", value, line}. */
export function tokenize(source) {
  const tokens = [];
  const templates = []; // for each open template literal's `${`, the brace depth it opened at
  let braces = 0;
  let line = 1;
  let i = 0;
  const push = (type, value, at) => tokens.push({ type, value, line: at });
  const countLines = (from, to) => {
    for (let k = from; k < to; k++) if (source[k] === "\n") line++;
  };
  // A template literal's text from i (after ` or }) to its end or its next `${`.
  const templateText = () => {
    const start = line;
    while (i < source.length && source[i] !== "`") {
      if (source[i] === "\\") i++;
      else if (source[i] === "$" && source[i + 1] === "{") {
        i += 2;
        templates.push(braces);
        braces++;
        push("literal", "`", start);
        return;
      }
      if (source[i] === "\n") line++;
      i++;
    }
    i++;
    push("literal", "`", start);
  };
  while (i < source.length) {
    const c = source[i];
    if (c === "\n") {
      line++;
      i++;
    } else if (/\s/.test(c)) {
      i++;
    } else if (c === "/" && source[i + 1] === "/") {
      while (i < source.length && source[i] !== "\n") i++;
    } else if (c === "/" && source[i + 1] === "*") {
      const end = source.indexOf("*/", i + 2);
      countLines(i, end);
      i = end + 2;
    } else if (c === '"' || c === "'") {
      const start = line;
      i++;
      while (source[i] !== c) i += source[i] === "\\" ? 2 : 1;
      i++;
      push("literal", c, start);
    } else if (c === "`") {
      i++;
      templateText();
    } else if (c === "/" && startsRegex(tokens.at(-1))) {
      const start = line;
      let inClass = false;
      i++;
      while (inClass || source[i] !== "/") {
        if (source[i] === "\\") i++;
        else if (source[i] === "[") inClass = true;
        else if (source[i] === "]") inClass = false;
        i++;
      }
      i++;
      while (/[a-z]/i.test(source[i] ?? "")) i++;
      push("literal", "/", start);
    } else if (/[\w$]/.test(c)) {
      const start = i;
      while (i < source.length && /[\w$]/.test(source[i])) i++;
      push(/\d/.test(c) ? "literal" : "name", source.slice(start, i), line);
    } else if (c === "}" && templates.length && templates.at(-1) === braces - 1) {
      templates.pop();
      braces--;
      i++;
      templateText();
    } else {
      const op = PUNCTUATORS.find((p) => source.startsWith(p, i)) ?? c;
      if (op === "{") braces++;
      if (op === "}") braces--;
      push("punct", op, line);
      i += op.length;
    }
  }
  return tokens;
}

function startsRegex(previous) {
  if (!previous) return true;
  if (previous.type === "literal") return false;
  if (previous.type === "name") return BEFORE_REGEX.has(previous.value);
  return ![")", "]", "}"].includes(previous.value);
}

/** Every function in the code: {name, start, end} (lines, 1-based, both included). */
export function functionSpans(source) {
  const tokens = tokenize(source);
  const match = new Map(); // a closing bracket's index -> its opening one's
  const open = [];
  for (const [k, token] of tokens.entries()) {
    if (token.type !== "punct") continue;
    if ("([{".includes(token.value)) open.push(k);
    else if (")]}".includes(token.value)) match.set(k, open.pop());
  }
  const spans = [];
  const stack = []; // open brackets: {index, fn?: {name, start}}
  const arrows = []; // expression-bodied arrows still open: {depth, name, start}
  const closeArrows = (depth, k) => {
    while (arrows.length && arrows.at(-1).depth >= depth) {
      const arrow = arrows.pop();
      spans.push({ name: arrow.name, start: arrow.start, end: tokens[k - 1].line });
    }
  };
  for (const [k, token] of tokens.entries()) {
    if (token.type !== "punct") continue;
    if (token.value === "=>" && tokens[k + 1]?.value !== "{") {
      arrows.push({ depth: stack.length, ...arrowStart(tokens, k, match) });
    } else if (token.value === "(" || token.value === "[") {
      stack.push({ index: k });
    } else if (token.value === "{") {
      stack.push({ index: k, fn: bodyOf(tokens, k, match) });
    } else if (token.value === ")" || token.value === "]" || token.value === "}") {
      closeArrows(stack.length, k);
      const opened = stack.pop();
      if (opened?.fn) spans.push({ ...opened.fn, end: token.line });
    } else if (token.value === "," || token.value === ";") {
      closeArrows(stack.length, k);
    }
  }
  closeArrows(0, tokens.length);
  return spans;
}

/** Where an arrow whose `=>` is token k begins, and what it is called. */
function arrowStart(tokens, k, match) {
  const first = tokens[k - 1].value === ")" ? match.get(k - 1) : k - 1;
  const before = tokens[first - 1]?.value === "async" ? first - 1 : first;
  return { name: nameBefore(tokens, before) ?? "arrow", start: tokens[before].line };
}

/** The name a function expression starting at token k is given: `const name =`, `name:`. */
function nameBefore(tokens, k) {
  const [name, sign] = [tokens[k - 2], tokens[k - 1]];
  return name?.type === "name" && (sign?.value === "=" || sign?.value === ":") ? name.value : null;
}

/** If the `{` at token k opens a function's body: its name and first line. */
function bodyOf(tokens, k, match) {
  const previous = tokens[k - 1];
  if (previous?.value === "=>") return arrowStart(tokens, k - 1, match);
  if (previous?.value !== ")") return null;
  const paren = match.get(k - 1);
  let head = paren - 1;
  const named = tokens[head];
  if (!named) return null;
  if (named.value === "function") return { name: nameBefore(tokens, head) ?? "function", start: named.line };
  if (named.type !== "name" || CONTROL.has(named.value)) return null;
  let begin = head;
  while (["function", "*", "async", "get", "set", "static"].includes(tokens[begin - 1]?.value)) begin--;
  head = begin;
  return { name: named.value, start: tokens[head].line };
}

function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith(".js") ? [path] : [];
  });
}

test("the reader finds functions of every form, and where they end", () => {
  const code = [
    "function a(x) {", // 1
    "  const s = `}\u0024{x}{`; // }", // 2
    "  return /}/.test(s) ? s.split('}') : [];", // 3
    "}", // 4
    "const b = async (y) => {", // 5
    "  const c = (z) =>", // 6
    "    z + 1;", // 7
    "  return { get d() {", // 8
    "    return c(y);", // 9
    "  } };", // 10
    "};", // 11
    "if (a) { b(); }", // 12
  ].join("\n");
  const spans = functionSpans(code).map(({ name, start, end }) => `${name} ${start}-${end}`);
  assert.deepEqual(spans.sort(), ["a 1-4", "b 5-11", "c 6-7", "d 8-10"]);
});

test(`no function in static/js spans more than ${MAX_LINES} lines`, () => {
  const files = sources(ROOT);
  assert.ok(files.length > 10, "the pages' modules were found");
  const long = files.flatMap((file) =>
    functionSpans(readFileSync(file, "utf8"))
      .filter(({ start, end }) => end - start + 1 > MAX_LINES)
      .map(({ name, start, end }) => `${file.slice(ROOT.length)}:${start} ${name} (${end - start + 1} lines)`),
  );
  assert.deepEqual(long, [], "split these along their seams, into modules if need be");
});
