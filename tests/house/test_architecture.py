"""The house's import direction (docs/ARCHITECTURE.md), read from the code's own imports.

Every `import` and `from ... import` of the two apps counts, at module level or inside a function (an
import deferred into a function is still a dependency). A module that imports against the direction
fails here with its name, line and the rule it broke.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The capabilities, lowest first: a package's services may use its own package and the packages before it.
PACKAGES = [
    "rtvi_monitor.core",  # the protocol, the reducer, patches, redaction, turn diagnosis: plain Python
    "dashboard.server",  # the ASGI server's tuning, behind its version guard
    "dashboard.net",  # the one outbound HTTP client
    "dashboard.web",  # HTTP helpers every view uses: parameters, JSON, errors, display
    "dashboard.org",  # organizations, members, invitations, keys, prices, the audit log
    "rtvi_monitor.redaction",  # an organization's redaction rules and the redactor they make
    "dashboard.agents",  # the agents API's client and cache, the built-in agents and deployments
    "rtvi_monitor.sessions",  # stored sessions and their messages, queries, spans, cost, /metrics
    "rtvi_monitor.live",  # the live path: sockets, admission, the session in memory, the writer, lifecycle
    "rtvi_monitor.audio",  # recordings: chunks, analysis, the player's data
    "rtvi_monitor.evals",  # calls turned into Pipecat eval scenarios, and agents' suites of them
    "rtvi_monitor.alerts",  # rules, firing, notification channels, the on-call workflow
    "rtvi_monitor.reviews",  # operators' marks on calls and turns, reasons, review queues, the bad share
    "rtvi_monitor.privacy",  # every place a caller's words are kept; erase and retention walk it
    "rtvi_monitor.overview",  # the home page's figures: every agent's health over the fleet
    "dashboard.access",  # who may do what (the policy), how a request or a socket proves who it is, and
    # the streams that ask again: the doors every interface goes through, above every service
]

# Modules that answer requests or sockets: they may use any package's services, never another package's
# interface, and no service imports them.
INTERFACE = {"views", "api", "audit_views", "builtin_api", "page", "consumers", "otlp"}

# What ties the packages together; it may import anything and nothing imports it (Django loads it).
WIRING = {
    "dashboard.settings",
    "dashboard.urls",
    "dashboard.asgi",
    "dashboard.apps",
    "dashboard.admin",
    "dashboard.models",
    "dashboard.management",
    "dashboard.templatetags",
    "rtvi_monitor.apps",
    "rtvi_monitor.admin",
    "rtvi_monitor.models",
    "rtvi_monitor.urls",
    "rtvi_monitor.management",
    "rtvi_monitor.templatetags",
    "rtvi_monitor.live.routing",
    "dashboard.org.urls",
}


def _rank(module: str) -> int | None:
    for i, package in enumerate(PACKAGES):
        if module == package or module.startswith(package + "."):
            return i
    return None


def _is_wiring(module: str) -> bool:
    return any(module == w or module.startswith(w + ".") for w in WIRING)


def _is_interface(module: str) -> bool:
    return module.rsplit(".", 1)[-1] in INTERFACE


def _ours(name: str) -> bool:
    return name.split(".")[0] in ("dashboard", "rtvi_monitor")


def _modules():
    for app in ("dashboard", "rtvi_monitor"):
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            yield module, path


def _imports(path: pathlib.Path):
    """(line, the module imported) for each import, `from a import b` read as a.b when a.b is a module."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                module_file = ROOT.joinpath(*full.split("."))
                is_module = module_file.with_suffix(".py").exists() or (module_file / "__init__.py").exists()
                yield node.lineno, full if is_module else node.module


def broken_rules(module: str, imported: str) -> str | None:
    """Why `module` may not import `imported`, or None when it may."""
    mine, theirs = _rank(module), _rank(imported)
    if mine == 0 and not _ours(imported) and imported.split(".")[0] in ("django", "channels", "asgiref"):
        return "the core is plain Python: no Django, no Channels"
    if not _ours(imported) or _is_wiring(module):
        return None
    if mine == 0 and theirs != 0:
        return "the core imports nothing of the apps"
    if _is_wiring(imported):
        return f"{imported} is wiring: import the model or service from its package"
    if mine is None or theirs is None:
        return None if mine is None else f"{imported} belongs to no package"
    if mine == theirs:
        return None
    if _is_interface(imported):
        return "an interface module of another package"
    if _is_interface(module):
        return None  # a page or an API may use any package's services
    if theirs > mine:
        return f"{PACKAGES[mine]} comes before {PACKAGES[theirs]}: turn the dependency around"
    return None


def test_every_module_belongs_to_a_package_or_the_wiring():
    loose = [
        m for m, _ in _modules() if _rank(m) is None and not _is_wiring(m) and m not in ("dashboard", "rtvi_monitor")
    ]
    assert loose == []


def test_every_import_runs_the_written_direction():
    wrong = []
    for module, path in _modules():
        for line, imported in _imports(path):
            why = broken_rules(module, imported)
            if why:
                wrong.append(f"{module}:{line} imports {imported}: {why}")
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "imported", "allowed"),
    [
        ("rtvi_monitor.core.state", "django.db", False),
        ("rtvi_monitor.core.state", "rtvi_monitor.sessions.models", False),
        ("rtvi_monitor.sessions.queries", "rtvi_monitor.alerts.rules", False),
        ("rtvi_monitor.alerts.rules", "rtvi_monitor.sessions.queries", True),
        ("rtvi_monitor.sessions.views", "rtvi_monitor.audio.store", True),
        ("rtvi_monitor.sessions.views", "rtvi_monitor.audio.views", False),
        ("rtvi_monitor.alerts.rules", "rtvi_monitor.models", False),
        ("dashboard.urls", "rtvi_monitor.alerts.views", True),
    ],
)
def test_the_rules_themselves(module, imported, allowed):
    """The checker refuses what it should (a checker that allows everything would pass the test above)."""
    assert (broken_rules(module, imported) is None) is allowed
