"""Validator of the optmem lifetime report, schema "optmem-report" versions 1 to 3
(docs/report-schema.md), and expand(), which gives a version 2 or 3 report's sites their
frames in place, as version 1 wrote them (and version 3's site ids dense, as before)."""

CATEGORIES = ("temporary", "per_iteration", "persistent")


class SchemaError(Exception):
    pass


def _fail(path, msg):
    raise SchemaError("%s: %s" % (path, msg))


def _uint(v, path, nullable=False):
    if v is None and nullable:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        _fail(path, "expected a non-negative integer, got %r" % (v,))


def _str(v, path, nullable=False):
    if v is None and nullable:
        return
    if not isinstance(v, str):
        _fail(path, "expected a string, got %r" % (v,))


def _hex(v, path, nullable=False):
    if v is None and nullable:
        return
    _str(v, path)
    if not v.startswith("0x"):
        _fail(path, "expected 0x-prefixed hex")
    int(v, 16)


def _obj(v, path, keys):
    if not isinstance(v, dict):
        _fail(path, "expected an object")
    missing = [k for k in keys if k not in v]
    if missing:
        _fail(path, "missing keys %s" % missing)
    extra = [k for k in v if k not in keys]
    if extra:
        _fail(path, "undocumented keys %s" % extra)


def _list(v, path):
    if not isinstance(v, list):
        _fail(path, "expected an array")
    return v


def _lifetime(v, path):
    if v is None:
        return
    _obj(v, path, ("min", "max", "mean"))
    _uint(v["min"], path + ".min")
    _uint(v["max"], path + ".max")
    if not isinstance(v["mean"], (int, float)) or not v["min"] <= v["mean"] + 0.001 \
            or not v["mean"] <= v["max"] + 0.001:
        _fail(path + ".mean", "not between min and max")


SERVING_KEYS = ("serving_requests", "hits", "misses", "served_from_plan", "fallbacks",
                "guard_rejections", "plans", "replans", "reused_plans", "plan_slots",
                "plan_peak_bytes",
                "plan_lower_bound_bytes", "arena_top_bytes", "released_bytes", "moved_bytes",
                "verify_violations", "invalid_frees", "saved_plan", "retired_blocks",
                "iteration_requests", "iteration_served", "plan_greedy_bytes",
                "plan_proven_bound_bytes", "plan_time_us", "plan_on_thread", "layout_calls",
                "layout_bytes", "layout_max_bytes", "layout_max_us", "served_by_cheap_key",
                "cheap_key_collisions")


VERSIONS = (1, 2, 3)


def expand(r):
    """Rewrites a version 2 or 3 report, in place, as the version 1 report of the same content:
    each site's frame indices replaced by the frames of the top-level tables ({address,
    module, offset, function}; python: {file, line, function, native_index}), the tables
    dropped; version 3's sites numbered by their index (peak, sample and resident blocks
    renumbered with them; a fold keeps its "folded", the counters their "folded_sites").
    Returns r; a version 1 report is returned as it is."""
    if r.get("version", 1) < 2:
        return r
    for sec in [r] + r.get("device_domains", []):
        index = {s["id"]: i for i, s in enumerate(sec.get("sites", []))}
        for i, s in enumerate(sec.get("sites", [])):
            s["id"] = i
        for p in sec.get("peak", {}).get("sites", []):
            p["site"] = index[p["site"]]
        for rec in sec.get("sample", {}).get("lifetimes", []):
            if rec:
                rec[0] = index[rec[0]]
        for rec in sec.get("resident", {}).get("blocks", []):
            rec[0] = index[rec[0]]
        for s in sec.get("sites", []):
            s["frames"] = [dict(r["frames"][i]) for i in s["frames"]]
            s["python"] = [dict(r["python_frames"][i], native_index=at)
                           for i, at in s["python"]]
    del r["frames"], r["python_frames"]
    r["version"] = 1
    return r


DOMAIN_KEYS = ("counters", "lower_bound_bytes", "peak_live_bytes", "peak", "iterations",
               "categories", "sites", "sample", "timeline", "resident")


def _frame(f, fp):
    _obj(f, fp, ("address", "module", "offset", "function"))
    _hex(f["address"], fp + ".address")
    _str(f["module"], fp + ".module", nullable=True)
    _hex(f["offset"], fp + ".offset", nullable=True)
    _str(f["function"], fp + ".function", nullable=True)


def _python_frame(f, fp):
    _str(f["file"], fp + ".file")
    _uint(f["line"], fp + ".line")
    _str(f["function"], fp + ".function")


def _domain(r, c, forked, tables):
    """The sections of one memory domain: the host's at the top level, or a device's."""
    if "serving" in r:  # plan mode only
        _obj(r["serving"], "serving", SERVING_KEYS)
        for k in SERVING_KEYS:
            _uint(r["serving"][k], "serving." + k)
        v = r["serving"]
        # A searched plan is never above greedy by size, nor below what the search proved.
        if v["plans"] and v["plan_greedy_bytes"]:
            if not v["plan_proven_bound_bytes"] <= v["plan_peak_bytes"] <= v["plan_greedy_bytes"]:
                raise SchemaError("serving: plan peak %d outside [proven bound %d, greedy %d]"
                                  % (v["plan_peak_bytes"], v["plan_proven_bound_bytes"],
                                     v["plan_greedy_bytes"]))
    v3 = c["version"] >= 3
    k = r["counters"]
    _obj(k, "counters", ("managed_requests", "managed_frees", "live_blocks", "live_bytes",
                         "call_sites") + (("folded_sites",) if v3 else ()))
    for key in k:
        _uint(k[key], "counters." + key)
    _uint(r["lower_bound_bytes"], "lower_bound_bytes")
    _uint(r["peak_live_bytes"], "peak_live_bytes")
    if r["peak_live_bytes"] < r["lower_bound_bytes"]:
        _fail("peak_live_bytes", "below lower_bound_bytes")
    nsites = k["call_sites"]
    sites = _list(r["sites"], "sites")
    ids = set(s.get("id") for s in sites if isinstance(s, dict))
    pk = r["peak"]
    _obj(pk, "peak", ("request", "live_bytes", "sites"))
    _uint(pk["request"], "peak.request")
    if pk["live_bytes"] != r["lower_bound_bytes"]:
        _fail("peak.live_bytes", "differs from lower_bound_bytes")
    total = 0
    for i, s in enumerate(_list(pk["sites"], "peak.sites")):
        _obj(s, "peak.sites[%d]" % i, ("site", "bytes", "blocks"))
        for key in s:
            _uint(s[key], "peak.sites[%d].%s" % (i, key))
        if s["site"] not in ids:
            _fail("peak.sites[%d].site" % i, "no such site")
        total += s["bytes"]
    if total > pk["live_bytes"]:
        _fail("peak.sites", "more bytes than were live")

    it = r["iterations"]
    _obj(it, "iterations", ("method", "found", "period_requests", "first_steady_request",
                            "starts_total", "starts", "detector", "marks"))
    if it["method"] not in ("auto", "marked"):
        _fail("iterations.method", "unknown method")
    if not isinstance(it["found"], bool):
        _fail("iterations.found", "expected a boolean")
    _uint(it["period_requests"], "iterations.period_requests", nullable=True)
    _uint(it["first_steady_request"], "iterations.first_steady_request", nullable=True)
    if it["found"] != (it["first_steady_request"] is not None):
        _fail("iterations", "found and first_steady_request disagree")
    _uint(it["starts_total"], "iterations.starts_total")
    starts = _list(it["starts"], "iterations.starts")
    for i, s in enumerate(starts):
        _uint(s, "iterations.starts[%d]" % i)
    if starts != sorted(starts):
        _fail("iterations.starts", "not ascending")
    d = it["detector"]
    if it["method"] == "marked":
        if d is not None:
            _fail("iterations.detector", "expected null when iterations are marked")
    else:
        _obj(d, "iterations.detector", ("thread", "thread_requests", "thread_period_requests",
                                        "locks", "thread_switches",
                                        "iterations_in_reported_lock"))
        for key in d:
            _uint(d[key], "iterations.detector." + key,
                  nullable=key in ("thread", "thread_period_requests"))
    m = it["marks"]
    _obj(m, "iterations.marks", ("count", "requests"))
    _uint(m["count"], "iterations.marks.count")
    for i, s in enumerate(_list(m["requests"], "iterations.marks.requests")):
        _uint(s, "iterations.marks.requests[%d]" % i)

    cat = r["categories"]
    if cat is not None:
        _obj(cat, "categories", ("iteration", "lower_bound_bytes") + CATEGORIES)
        span = _list(cat["iteration"], "categories.iteration")
        if len(span) != 2 or span[0] > span[1]:
            _fail("categories.iteration", "expected [start, end]")
        _uint(cat["lower_bound_bytes"], "categories.lower_bound_bytes")
        for name in CATEGORIES:
            _obj(cat[name], "categories." + name, ("bytes", "blocks"))
            _uint(cat[name]["bytes"], "categories.%s.bytes" % name)
            _uint(cat[name]["blocks"], "categories.%s.blocks" % name)

    if len(sites) != nsites:
        _fail("sites", "length differs from counters.call_sites")
    site_keys = ("id", "frames", "count", "total_bytes", "min_size", "max_size", "live_blocks",
                 "live_bytes", "freed", "lifetime_requests", "lifetime_ns", "category_bytes",
                 "category")
    folded = 0
    for i, s in enumerate(sites):
        path = "sites[%d]" % i
        # "python" came with Python frames (2026-11-26); older reports lack it.
        _obj(s, path, site_keys + (("python",) if "python" in s else ()) +
             (("folded",) if v3 and "folded" in s else ()))
        _uint(s["id"], path + ".id")
        if not v3 and s["id"] != i:
            _fail(path + ".id", "ids must equal the index")
        if v3 and i and s["id"] <= sites[i - 1]["id"]:
            _fail(path + ".id", "ids must ascend")
        if "folded" in s:
            _uint(s["folded"], path + ".folded")
            folded += s["folded"]
        frames = _list(s["frames"], path + ".frames")
        for j, f in enumerate(frames):
            fp = "%s.frames[%d]" % (path, j)
            if tables is not None:
                _uint(f, fp)
                if f >= len(tables[0]):
                    _fail(fp, "not an index of frames")
            else:
                _frame(f, fp)
        for j, f in enumerate(_list(s.get("python", []), path + ".python")):
            fp = "%s.python[%d]" % (path, j)
            if tables is not None:
                if not isinstance(f, list) or len(f) != 2:
                    _fail(fp, "expected [python_frames index, native_index]")
                _uint(f[0], fp + "[0]")
                if f[0] >= len(tables[1]):
                    _fail(fp + "[0]", "not an index of python_frames")
                native = f[1]
            else:
                _obj(f, fp, ("file", "line", "function", "native_index"))
                _python_frame(f, fp)
                native = f["native_index"]
            _uint(native, fp + ".native_index", nullable=True)
            if native is not None and native >= len(frames):
                _fail(fp + ".native_index", "not the index of a frame")
        for key in ("count", "total_bytes", "live_blocks", "live_bytes", "freed"):
            _uint(s[key], path + "." + key)
        _uint(s["min_size"], path + ".min_size", nullable=True)
        _uint(s["max_size"], path + ".max_size", nullable=True)
        _lifetime(s["lifetime_requests"], path + ".lifetime_requests")
        _lifetime(s["lifetime_ns"], path + ".lifetime_ns")
        if (s["lifetime_requests"] is None) != (s["freed"] == 0):
            _fail(path, "lifetimes must be null exactly when nothing was freed")
        _obj(s["category_bytes"], path + ".category_bytes", CATEGORIES)
        for name in CATEGORIES:
            _uint(s["category_bytes"][name], "%s.category_bytes.%s" % (path, name))
        if s["category"] is not None and s["category"] not in CATEGORIES:
            _fail(path + ".category", "unknown category")
    if v3:
        # Every request is some listed site's or fold's: the counts add up exactly.
        if sum(s["count"] for s in sites) != k["managed_requests"]:
            _fail("sites", "counts do not add up to counters.managed_requests")
        if folded != k["folded_sites"]:
            _fail("counters.folded_sites", "differs from the sites folded into the folds")

    sm = r["sample"]
    _obj(sm, "sample", ("first_request", "end_request", "fields", "lifetimes", "live_bytes"))
    _uint(sm["first_request"], "sample.first_request")
    _uint(sm["end_request"], "sample.end_request")
    if sm["fields"] != ["site", "size", "birth_request", "death_request", "birth_ns", "death_ns",
                        "offset"]:
        _fail("sample.fields", "unexpected fields")
    lt = _list(sm["lifetimes"], "sample.lifetimes")
    lb = _list(sm["live_bytes"], "sample.live_bytes")
    n = sm["end_request"] - sm["first_request"]
    if len(lt) != n or len(lb) != n:
        _fail("sample", "expected one lifetime and one live_bytes per request in the sample")
    if n > c["sample_capacity"]:
        _fail("sample", "more requests than the capacity")
    for i, rec in enumerate(lt):
        path = "sample.lifetimes[%d]" % i
        if rec == []:
            continue
        if not isinstance(rec, list) or len(rec) != 7:
            _fail(path, "expected 7 fields")
        site, size, birth, death, bns, dns, offset = rec
        if offset is not None:
            _uint(offset, path + ".offset")
        _uint(site, path)
        _uint(size, path)
        if birth != sm["first_request"] + i:
            _fail(path, "birth_request out of order")
        if site not in ids:
            _fail(path, "no such site")
        _uint(death, path, nullable=True)
        _uint(bns, path)
        _uint(dns, path, nullable=True)
        if (death is None) != (dns is None) or (death is not None and (death <= birth or dns < bns)):
            _fail(path, "inconsistent death")
        _uint(lb[i], "sample.live_bytes[%d]" % i)
    rs = r["resident"]
    _obj(rs, "resident", ("blocks", "omitted_blocks", "omitted_bytes", "complete"))
    _uint(rs["omitted_blocks"], "resident.omitted_blocks")
    _uint(rs["omitted_bytes"], "resident.omitted_bytes")
    if not isinstance(rs["complete"], bool):
        _fail("resident.complete", "expected a boolean")
    for i, rec in enumerate(_list(rs["blocks"], "resident.blocks")):
        path = "resident.blocks[%d]" % i
        if not isinstance(rec, list) or len(rec) != 4:
            _fail(path, "expected [site, size, birth_request, death_request|null]")
        site, size, birth, death = rec
        for v in (site, size, birth):
            _uint(v, path)
        _uint(death, path, nullable=True)
        if site not in ids:
            _fail(path, "no such site")
        # Born before the sample, live at its first request.
        if birth >= sm["first_request"] or (death is not None and death <= sm["first_request"]):
            _fail(path, "not live at the sample's first request")
    tl = r["timeline"]
    _obj(tl, "timeline", ("first_request", "requests_per_point", "max_live_bytes"))
    _uint(tl["first_request"], "timeline.first_request")
    _uint(tl["requests_per_point"], "timeline.requests_per_point")
    pts = _list(tl["max_live_bytes"], "timeline.max_live_bytes")
    if len(pts) > 512:
        _fail("timeline.max_live_bytes", "more than 512 points")
    for i, v in enumerate(pts):
        _uint(v, "timeline.max_live_bytes[%d]" % i)
    # A forked child's lower bound starts with what it inherited, before any point.
    if pts and (max(pts) > r["lower_bound_bytes"] or
                (not forked and max(pts) != r["lower_bound_bytes"])):
        _fail("timeline", "its maximum disagrees with lower_bound_bytes")


def validate(r):
    """Raise SchemaError unless r (parsed JSON) is a valid report of version 1 to 3."""
    if not isinstance(r, dict) or r.get("schema") != "optmem-report" or \
            r.get("version") not in VERSIONS:
        _fail("$", "not an optmem-report of version %s" % " or ".join(map(str, VERSIONS)))
    top = ("schema", "version", "process", "configuration", "domains", "duration_ns",
           "device_domains") + DOMAIN_KEYS
    tables = None
    if r["version"] >= 2:
        top += ("frames", "python_frames")
        tables = (_list(r.get("frames"), "frames"), _list(r.get("python_frames"), "python_frames"))
    _obj(r, "$", top + (("serving",) if "serving" in r else ()))
    if tables is not None:
        for j, f in enumerate(tables[0]):
            _frame(f, "frames[%d]" % j)
        for j, f in enumerate(tables[1]):
            _obj(f, "python_frames[%d]" % j, ("file", "line", "function"))
            _python_frame(f, "python_frames[%d]" % j)
    p = r["process"]
    _obj(p, "process", ("pid", "ppid", "start_time", "managed_requests", "iterations_found",
                        "ancestors", "rank", "exe", "argv", "forked_at_request"))
    if not isinstance(p["iterations_found"], bool):
        _fail("process.iterations_found", "expected a boolean")
    _uint(p["pid"], "process.pid")
    _uint(p["start_time"], "process.start_time")
    _uint(p["managed_requests"], "process.managed_requests")
    for i, a in enumerate(_list(p["ancestors"], "process.ancestors")):
        if not (isinstance(a, list) and len(a) == 2):
            _fail("process.ancestors[%d]" % i, "expected [pid, start_time]")
        _uint(a[0], "process.ancestors[%d][0]" % i)
        _uint(a[1], "process.ancestors[%d][1]" % i)
    _uint(p["ppid"], "process.ppid")
    _uint(p["rank"], "process.rank")
    _str(p["exe"], "process.exe", nullable=True)
    for i, a in enumerate(_list(p["argv"], "process.argv")):
        _str(a, "process.argv[%d]" % i)
    _uint(p["forked_at_request"], "process.forked_at_request", nullable=True)
    forked = p["forked_at_request"] is not None
    c = r["configuration"]
    _obj(c, "configuration", ("mode", "min_bytes", "stack_depth", "warmup", "sample_capacity"))
    if c["mode"] not in ("off", "trace", "plan"):
        _fail("configuration.mode", "unknown mode")
    _uint(c["min_bytes"], "configuration.min_bytes")
    _uint(c["stack_depth"], "configuration.stack_depth")
    if c["warmup"] != "auto":
        _uint(c["warmup"], "configuration.warmup")
    _uint(c["sample_capacity"], "configuration.sample_capacity")
    _uint(r["duration_ns"], "duration_ns")
    _domain(r, dict(c, version=r["version"]), forked, tables)

    devices = _list(r["device_domains"], "device_domains")
    names = ["cpu"]
    for i, d in enumerate(devices):
        path = "device_domains[%d]" % i
        _obj(d, path, ("name",) + DOMAIN_KEYS + (("serving",) if "serving" in d else ()))
        _str(d["name"], path + ".name")
        if not 1 <= len(d["name"]) <= 15 or not all("!" <= ch <= "~" for ch in d["name"]):
            _fail(path + ".name", "expected 1 to 15 printable ASCII characters, no spaces")
        names.append(d["name"])
        try:
            _domain(d, dict(c, version=r["version"]), forked, tables)
        except SchemaError as e:
            raise SchemaError("%s.%s" % (path, e))
    if len(set(names)) != len(names):
        _fail("device_domains", "a name appears twice (or is \"cpu\")")
    if r["domains"] != names:
        _fail("domains", "expected %r: \"cpu\", then the device domains in order" % names)
