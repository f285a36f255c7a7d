"""What every peer tool reports the same way (tools/hf_peer.py, tools/engine_peer.py): timing
summaries as gengraph writes them, the process's own peak resident memory, and how the runner timed it. Imports nothing
heavy, so that an engine's peer process holds only that engine."""
import resource
import statistics


def summary(values):
    if not values:
        return {}
    s = sorted(values)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "mean": statistics.fmean(s),
            "stdev": statistics.stdev(s) if len(s) > 1 else 0.0, "values": values}


def peak_rss_bytes():
    """This process's peak resident memory. Not getrusage's ru_maxrss: Linux carries the spawning
    process's high-water mark across exec (the peer is spawned from gengraph, which holds a model),
    so ru_maxrss would report gengraph's peak wherever it is the larger. VmHWM is this image's own."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def timed_note(req):
    """How gengraph's runner timed this process (the request's "order": run.peer_order)."""
    if req.get("order") == "interleaved":
        return "timed in turn with gengraph's rows: a process for each repeat, with its own warm-up"
    return "timed as a separate process after gengraph's rows"
