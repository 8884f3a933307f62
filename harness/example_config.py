"""The commented `tickwork.toml` that `tickwork init` writes (a test keeps it valid).

`ops/tickwork.example.toml` is this text too; a test holds the two equal.
"""

EXAMPLE_CONFIG = """\
# tickwork configuration. Every key is optional; environment variables override the file:
# TICKWORK_STORE_URL, TICKWORK_PATHS_RESULTS, TICKWORK_PATHS_SPOOL, ...
# Secrets (API keys) never go here: they come from the environment only.

[store]
# SQLite (embedded, the default) or PostgreSQL for several hosts:
#   url = "postgresql://tickwork@db.internal/tickwork"   (password: PGPASSWORD or ~/.pgpass)
url = "sqlite:///./.tickwork/events.db"
# "process": a committed event survives any crash of tickwork's processes; a crash of the
# machine (or of the PostgreSQL server) may lose the last fraction of a second of appends.
# "power": survives those too, at one fsync per append (several times fewer appends/s).
durability = "process"

[paths]
results = ".tickwork/results"   # tick result files: <results>/<level>/<YYYY-MM-DD>/<tick>.json
spool = ".tickwork/spool"       # events kept here while the store is unreachable
digests = ".tickwork/digests"   # every published digest is kept here

[runner]
max_concurrent = 4              # ticks running at once, all levels together
start_spacing_seconds = 0.25    # least time between two tick starts
grace_seconds = 5               # at a tick's timeout: SIGTERM, this long, then SIGKILL
shutdown_grace_seconds = 30     # on SIGTERM, running ticks get this long to finish
infra_retries = 3               # 429/5xx/timeouts: retries with backoff, then the level pauses
content_retries = 1             # empty or invalid output: retries, then TickFailed
retry_backoff_seconds = 2       # first wait before a retry; doubles at each retry ...
retry_backoff_max_seconds = 60  # ... up to this

[rag]
# The rag_lookup tool (levels with rag = true): `tickwork rag index` indexes this folder.
# folder = "notes"
index = ".tickwork/rag.db"
k = 5                           # passages per lookup (at most 5)
timeout_seconds = 20            # a lookup that takes longer fails; the tick goes on

[api]
# `tickwork serve`: the HTTP API, /metrics and the dashboard. Bound to loopback by default;
# any other address needs a bearer token, from the environment only: TICKWORK_API_TOKEN.
host = "127.0.0.1"
port = 8470
refresh_seconds = 5             # how often the dashboard reloads

[governor]
# The context-size guard, in every tick and in `tickwork governor` (the proxy for other
# agents). Tokens are estimated from the request's size with a ratio learned per model.
soft_tokens = 60000             # from here the agent is told to wrap up
# hard_tokens = 65000           # from here the model is not called (default soft + 5000; 0: off)
# exempt_models = ["gemini-2.5-pro"]   # measured, never cut
# chars_per_token = 3.2          # starting ratio; learned per model from real prompt_tokens
# calibrate = true               # learn the ratio (false: keep the one above)
# directive = "Context is at {est} tokens (limit {threshold}): wrap up now."
# stop_message = "Stopped: the request would be {est} tokens (hard limit {threshold})."
# upstream = "http://127.0.0.1:4000"   # the proxy forwards here (env GOV_UPSTREAM works too)
# host = "127.0.0.1"             # where `tickwork governor` listens
# port = 8090
# log = ".tickwork/governor.jsonl"     # one JSON line per decision of the proxy
# ledger_level = "proxy"         # spend of proxied calls is booked under this level
# alert_episode_seconds = 3600   # a quiet conversation this long starts a new alert episode
# Alerts: apprise URLs in the environment only, TICKWORK_ALERT_URLS="json://host/hook,..."

# Which model runs each tick can come from a routing catalog instead of each level's `model`
# (check it first: tickwork catalog check FILE; see ops/catalog.example.toml).
# [routing]
# catalog = "ops/catalog.example.toml"
# availability_ttl_seconds = 300  # a target that failed on infrastructure is passed over this long

# Prices in USD per million tokens, for models genai-prices does not know (or to override it).
# [prices."my-local-model"]
# input_per_mtok = 0.0
# output_per_mtok = 0.0
# cache_read_per_mtok = 0.0
# cache_write_per_mtok = 0.0

# A level wakes an agent on a schedule: cron ("schedule") or an interval ("every").
[levels.min]
schedule = "* * * * *"          # cron, read in `timezone` (default UTC)
prompt = "Check the inbox and answer anything urgent. Be brief."
model = "gpt-4o-mini"
timeout_seconds = 50
max_tool_calls = 30
overlap = "skip"                # a slot firing while the last tick runs is skipped ("allow")
priority = 10                   # lower numbers start first when places are scarce
daily_token_budget = 2000000    # slots that would start over it are skipped (budget)
# daily_usd_budget = 5.0        # the same in USD, priced as `tickwork spend` prices
# reserve_tokens = 10000        # held against the budget per tick from claim to end
# max_concurrent = 1            # ticks of this level at once (under [runner] max_concurrent)
# catch_up_seconds = 0          # after downtime, the latest missed slot this recent runs
# timezone = "UTC"              # IANA zone the cron schedule is read in
# instructions = ""             # the agent's system prompt
# can_shell = false             # give the agent a shell tool
# rag = false                   # give the agent the rag_lookup tool over [rag]

[levels.hour]
schedule = "0 * * * *"
# every = "15m"                 # an interval instead of cron (set one of the two)
# $level, $slot and $previous_result (the last completed tick's text) are filled in.
prompt = "Summarize the last hour of minute ticks. An hour ago you wrote: $previous_result"
# prompt_file = "prompts/hour.md"   # instead of prompt: read at every tick
model = "gpt-4o-mini"
effort = "medium"
timeout_seconds = 900
max_tool_calls = 300

# A digest of what the levels did, published by `tickwork run` once per period.
# [digests.daily]
# schedule = "0 8 * * *"          # or every = "1h"; read in `timezone` (default UTC)
# period = "1d"                   # span covered, ending at the slot (default: since the last slot)
# levels = ["min", "hour"]        # default: all levels
# format = "md"                   # md | html | json
# excerpt_chars = 280             # start of each completed tick's text
# files = [".tickwork/outbox"]    # folders a copy is written to
# notify = ["SLACK_DIGEST_URL"]   # env variables holding apprise URLs (never the URL here)
# retries = 3                     # further attempts of a failed delivery, with backoff
# retry_backoff_seconds = 5
"""
