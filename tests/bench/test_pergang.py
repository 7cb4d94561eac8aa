"""Issue 23 item 2: per-gang records (domains spanned, the fewest possible) and B against the
other arms gang by gang. Expectations are counted by hand from the drawing below."""

from __future__ import annotations

from bench.harness import analysis, pergang, report, runner, workload
from extender import topotext

# 6 nodes of 8 GPUs: leaf r1 = NVLink n1 (h1 h2) + n2 (h3); leaf r2 = NVLink n1 (h4 h5 h6).
NODES = topotext.parse("""
block b1
  rack r1
    nvl n1: h1 h2
    nvl n2: h3
  rack r2
    nvl n1: h4 h5 h6
""").nodes
PATHS = analysis.node_paths(NODES)
ALL_FREE = {f"h{i}": 8 for i in range(1, 7)}


def test_fewest_domains_per_level_on_an_empty_cluster():
    # 3 pods x 8 GPUs: r2/n1 holds all three.
    assert pergang.fewest_domains(PATHS, ALL_FREE, 3, 8) == {"block": 1, "leaf": 1, "nvl": 1, "host": 3}
    # 4 pods x 4 GPUs: two nodes, one NVLink domain.
    assert pergang.fewest_domains(PATHS, ALL_FREE, 4, 4) == {"block": 1, "leaf": 1, "nvl": 1, "host": 2}
    # 7 pods x 8 GPUs: more than the 6 nodes.
    assert pergang.fewest_domains(PATHS, ALL_FREE, 7, 8) is None


def test_fewest_domains_counts_only_free_gpus_and_each_level_on_its_own():
    free = {**ALL_FREE, "h5": 4}  # 4 GPUs of h5 taken by another job
    # 3 x 8: no NVLink domain holds 3 any more (r1/n1 2, r2/n1 2, r1/n2 1): 2 of them; leaf r1 holds 3.
    assert pergang.fewest_domains(PATHS, free, 3, 8) == {"block": 1, "leaf": 1, "nvl": 2, "host": 3}
    # 5 x 8: 2 leaves (r1 3 + r2 2), 3 NVLink domains, 5 nodes.
    assert pergang.fewest_domains(PATHS, free, 5, 8) == {"block": 1, "leaf": 2, "nvl": 3, "host": 5}


def test_fewest_domains_inside_the_required_level():
    free = {**ALL_FREE, "h5": 4}
    # Required one NVLink domain: none holds 3 x 8 now.
    assert pergang.fewest_domains(PATHS, free, 3, 8, within="nvl") is None
    # Required one leaf: only r1 holds 3 x 8, over its 2 NVLink domains.
    assert pergang.fewest_domains(PATHS, free, 3, 8, within="leaf") == {"block": 1, "leaf": 1, "nvl": 2, "host": 3}
    # 2 x 8 inside one NVLink domain: r1/n1 or r2/n1 (h4 h6), both 2 nodes.
    assert pergang.fewest_domains(PATHS, free, 2, 8, within="nvl") == {"block": 1, "leaf": 1, "nvl": 1, "host": 2}


def _arm(name: str, placed: dict[str, str], busy: dict[str, str], jobs: list[workload.Job]) -> dict:
    """analyse() of an arm where the gang g's pods landed as ``placed`` (pod -> node) at t=5 and
    single pods ``busy`` (pod -> node, 8 GPUs) were bound at t=1 and still run."""
    pods = {p: runner.PodRecord(p, "g", 8, created=0.5, bound=5.0, node=n) for p, n in placed.items()}
    pods |= {p: runner.PodRecord(p, p, 8, created=0.5, bound=1.0, node=n) for p, n in busy.items()}
    out, _ = analysis.analyse(runner.ArmResult(name, pods, 10.0, 1.0), jobs, NODES, {})
    return out


GANG = workload.Job("g", "gang", 3, 8, 0.0, None, preferred="nvl")
JOBS = [GANG, workload.Job("s0", "single", 1, 8, 0.0, None)]


def test_analyse_records_each_gang_spans_and_fewest_from_the_bindings():
    # s0 holds h4: r2/n1 has only 2 nodes left, so the fewest is 2 NVLink domains (r1/n1 + one more).
    out = _arm("B", {"g-0": "h1", "g-1": "h2", "g-2": "h3"}, {"s0": "h4"}, JOBS)
    rec = out["gang_records"]["g"]
    assert rec["request"] == "preferred nvl" and rec["pods"] == 3 and rec["bound_at_s"] == 5.0
    assert rec["spans"] == {"block": 1, "leaf": 1, "nvl": 2, "host": 3}
    assert rec["fewest"] == {"block": 1, "leaf": 1, "nvl": 2, "host": 3}
    assert rec["landed"] == "leaf" and rec["narrowest"] == "leaf"
    assert out["domains_beyond_fewest_mean"] == {"block": 0, "leaf": 0, "nvl": 0, "host": 0}
    # Over two leaves and three NVLink domains where one leaf and two domains would do.
    wide = _arm("B", {"g-0": "h1", "g-1": "h3", "g-2": "h5"}, {"s0": "h4"}, JOBS)
    assert wide["gang_records"]["g"]["spans"] == {"block": 1, "leaf": 2, "nvl": 3, "host": 3}
    assert wide["domains_beyond_fewest_mean"] == {"block": 0, "leaf": 1, "nvl": 1, "host": 0}


def test_a_gang_not_bound_whole_has_no_spans():
    out = _arm("B", {"g-0": "h1"}, {}, JOBS)
    assert out["gang_records"]["g"] == {"pods": 3, "gpus": 8, "request": "preferred nvl", "spans": None}
    assert out["domains_beyond_fewest_mean"] is None


def test_compare_names_the_gangs_b_lost_and_why():
    # B: s0 on h4 and the gang over r1 (2 NVLink domains, the fewest B's cluster allowed): cluster.
    # D: nothing else running, the gang in r2/n1 (1 domain).
    b = _arm("B", {"g-0": "h1", "g-1": "h2", "g-2": "h3"}, {"s0": "h4"}, JOBS)
    d = _arm("D", {"g-0": "h4", "g-1": "h5", "g-2": "h6"}, {"s0": "h1"}, JOBS)
    comp = pergang.compare({"B": b, "D": d})
    assert comp["summary"]["D"] == {"gangs": 1, "b_wider": {"block": 0, "leaf": 0, "nvl": 1, "host": 0},
                                    "arm_wider": {"block": 0, "leaf": 0, "nvl": 0, "host": 0}}
    (loss,) = comp["losses"]
    assert loss["gang"] == "g" and loss["arm"] == "D" and loss["levels"] == ["nvl"]
    assert loss["why"] == {"nvl": "cluster"}
    assert loss["B"]["spans"]["nvl"] == 2 and loss["D"]["spans"]["nvl"] == 1
    # B over two leaves and three NVLink domains where r2/n1 held the gang: the planner's doing.
    b_wide = _arm("B", {"g-0": "h1", "g-1": "h3", "g-2": "h5"}, {"s0": "h2"}, JOBS)
    (loss,) = pergang.compare({"B": b_wide, "D": d})["losses"]
    assert loss["levels"] == ["leaf", "nvl"] and loss["why"] == {"leaf": "planner", "nvl": "planner"}
    # Where B is as tight as the other arm there is nothing to report, and no B means no comparison.
    assert pergang.compare({"B": d, "D": d})["losses"] == []
    assert pergang.compare({"D": d}) is None


# Two blocks: b1 has 3 nodes, each its own leaf; b2 one leaf of 2 nodes.
TWO_BLOCKS = topotext.parse("""
block b1
  rack r1
    nvl n1: h1
  rack r2
    nvl n1: h2
  rack r3
    nvl n1: h3
block b2
  rack r1
    nvl n1: h4 h5
""").nodes


def test_a_gang_kept_in_its_narrowest_block_spans_more_leaves_than_the_bound_and_that_is_not_the_planner():
    paths = analysis.node_paths(TWO_BLOCKS)
    free = {f"h{i}": 8 for i in range(1, 6)}
    # Each level on its own: 1 block (b1), 2 leaves (b2/r1 + one of b1's), 2 NVLink domains.
    assert pergang.fewest_domains(paths, free, 3, 8) == {"block": 1, "leaf": 2, "nvl": 2, "host": 3}
    # Kept in b1, the only block that holds 3: 3 leaves and 3 NVLink domains.
    assert pergang.fewest_in_narrowest(paths, free, 3, 8) == {"block": 1, "leaf": 3, "nvl": 3, "host": 3}
    # 2 pods fit b2/r1/n1: the narrowest is that NVLink domain.
    assert pergang.fewest_in_narrowest(paths, free, 2, 8) == {"block": 1, "leaf": 1, "nvl": 1, "host": 2}
    assert pergang.fewest_in_narrowest(paths, free, 6, 8) is None
    jobs = [workload.Job("g", "gang", 3, 8, 0.0, None)]

    def arm(name: str, placed: dict[str, str]) -> dict:
        pods = {p: runner.PodRecord(p, "g", 8, created=0.5, bound=5.0, node=n) for p, n in placed.items()}
        return analysis.analyse(runner.ArmResult(name, pods, 10.0, 1.0), jobs, TWO_BLOCKS, {})[0]

    b = arm("B", {"g-0": "h1", "g-1": "h2", "g-2": "h3"})  # all of b1
    d = arm("D", {"g-0": "h4", "g-1": "h5", "g-2": "h1"})  # b2/r1 and b1/r1: 2 blocks
    assert b["gang_records"]["g"]["fewest_narrowest"] == {"block": 1, "leaf": 3, "nvl": 3, "host": 3}
    comp = pergang.compare({"B": b, "D": d})
    assert comp["summary"]["D"]["b_wider"] == {"block": 0, "leaf": 1, "nvl": 1, "host": 0}
    assert comp["summary"]["D"]["arm_wider"] == {"block": 1, "leaf": 0, "nvl": 0, "host": 0}
    (loss,) = comp["losses"]
    assert loss["why"] == {"leaf": "narrowest", "nvl": "narrowest"}
    # Over both blocks where b1 held it: wider than even the narrowest placement, the planner's.
    b_wide = arm("B", {"g-0": "h1", "g-1": "h2", "g-2": "h4"})
    tight = arm("D", {"g-0": "h1", "g-1": "h4", "g-2": "h5"})
    (loss,) = pergang.compare({"B": b_wide, "D": tight})["losses"]
    assert loss["levels"] == ["leaf", "nvl"] and loss["why"] == {"leaf": "planner", "nvl": "planner"}


def test_gpus_another_gang_took_right_after_count_as_held_not_the_planners():
    # B's gang over r1's two NVLink domains at t=5 while r2/n1 looked free; gang x bound there at
    # t=6 (planned before g, its GPUs held: the watch sees only the binding). D's gang took r2/n1.
    jobs = [GANG, workload.Job("x", "gang", 3, 8, 0.0, None)]
    pods = {p: runner.PodRecord(p, "g", 8, created=0.5, bound=5.0, node=n)
            for p, n in {"g-0": "h1", "g-1": "h2", "g-2": "h3"}.items()}
    pods |= {f"x-{i}": runner.PodRecord(f"x-{i}", "x", 8, created=0.5, bound=5.0 + pergang.HELD_S / 2, node=n)
             for i, n in enumerate(("h4", "h5", "h6"))}
    b, _ = analysis.analyse(runner.ArmResult("B", pods, 10.0, 1.0), jobs, NODES, {})
    rec = b["gang_records"]["g"]
    assert rec["fewest"]["nvl"] == 1 and rec["fewest_held"]["nvl"] == 2
    d = _arm("D", {"g-0": "h4", "g-1": "h5", "g-2": "h6"}, {}, JOBS)
    (loss,) = pergang.compare({"B": b, "D": d})["losses"]
    assert loss["levels"] == ["nvl"] and loss["why"] == {"nvl": "held"}
    # Bound later than HELD_S after the gang: not counted as held.
    late = {k: (runner.PodRecord(k, "x", 8, created=0.5, bound=5.0 + 2 * pergang.HELD_S, node=r.node)
                if r.job == "x" else r) for k, r in pods.items()}
    b_late, _ = analysis.analyse(runner.ArmResult("B", late, 10.0, 1.0), jobs, NODES, {})
    assert b_late["gang_records"]["g"]["fewest_held"]["nvl"] == 1
    assert pergang.compare({"B": b_late, "D": d})["losses"][0]["why"] == {"nvl": "planner"}


def test_a_node_busy_when_the_gang_came_and_free_when_it_bound_explains_its_span():
    # s0 ran on h4 from before g was created (0.5) until 4.0; g bound at 5 over r1's two NVLink
    # domains, when r2/n1 was free again: when it came, r2/n1 held only 2 of its 3 pods.
    pods = {p: runner.PodRecord(p, "g", 8, created=0.5, bound=5.0, node=n)
            for p, n in {"g-0": "h1", "g-1": "h2", "g-2": "h3"}.items()}
    pods["s0"] = runner.PodRecord("s0", "s0", 8, created=0.0, bound=0.1, node="h4", finished=4.0)
    b, _ = analysis.analyse(runner.ArmResult("B", pods, 10.0, 1.0), JOBS, NODES, {})
    rec = b["gang_records"]["g"]
    assert rec["fewest"]["nvl"] == 1 and rec["fewest_created"]["nvl"] == 2
    d = _arm("D", {"g-0": "h4", "g-1": "h5", "g-2": "h6"}, {}, JOBS)
    assert pergang.compare({"B": b, "D": d})["losses"][0]["why"] == {"nvl": "cluster"}


def test_report_has_the_gang_by_gang_section(tmp_path):
    b = _arm("B", {"g-0": "h1", "g-1": "h3", "g-2": "h5"}, {"s0": "h2"}, JOBS)
    d = _arm("D", {"g-0": "h4", "g-1": "h5", "g-2": "h6"}, {"s0": "h1"}, JOBS)
    run = {"meta": {"run": 1, "dir": ".", "date": "x", "load_average": {}}, "arms": {"B": b, "D": d},
           "series": {}, "skipped": {}}
    meta = {"scenario": "gangs", "mode": "quick", "seed": 1, "command": "c", "date": "d", "machine": "m",
            "topology": {"nodes": 6, "gpus": 48, "spec": "s"}, "workload": {"jobs": 2, "pods": 4, "gangs": 1},
            "wall_s": 1.0, "arm_titles": {"B": "b", "D": "d"}}
    doc = report.write(tmp_path, meta, [run])
    assert doc["runs"][0]["gang_comparison"]["losses"][0]["gang"] == "g"
    text = (tmp_path / "report.md").read_text()
    assert "| 1 | D | 1 | 0 / 1 / 1 / 0 | 0 / 0 / 0 / 0 |" in text
    assert "| 1 | g | 3 x 8 | preferred nvl | D | leaf | 2 (1) | 1 (1) | planner |" in text
    assert "| NVLink domains / leaves per gang beyond the fewest possible (mean) | 2 / 1 | 0 / 0 |" in text


def test_fragmentation_over_free_gpu_seconds_does_not_punish_a_busier_cluster():
    # Pods of 4 GPUs only, so a node's stranded GPUs are its free GPUs mod 4. Observed 10 s (0..9).
    jobs = [workload.Job("w", "single", 1, 4, 0.0, None)]

    def arm(pods: list[tuple[str, int, float | None]]) -> dict:
        recs = {f"p{i}": runner.PodRecord(f"p{i}", "w", gpus, created=0.0, bound=0.0, node=node, finished=done)
                for i, (node, gpus, done) in enumerate(pods)}
        out, _ = analysis.analyse(runner.ArmResult("X", recs, 9.0, 1.0), jobs, NODES, {})
        return out

    # Busy: 2 GPUs stranded on h1 (6 free) and h2-h6 full for 5 s: 2 of 6 free GPUs stranded, then 2 of 46.
    busy = arm([("h1", 2, None), *((f"h{i}", 8, 4.5) for i in range(2, 7))])
    # Idle: 2 GPUs stranded on each of h1 and h2 the whole time: 4 of 44 free GPUs.
    idle = arm([("h1", 2, None), ("h2", 2, None)])
    # The per-second mean ranks the busy arm worse (its 5 busy seconds count 2/6 each) ...
    assert busy["fragmentation_mean"] == round((5 * 2 / 6 + 5 * 2 / 46) / 10, 3)
    assert idle["fragmentation_mean"] == round(4 / 44, 3)
    assert busy["fragmentation_mean"] > idle["fragmentation_mean"]
    # ... though it strands half as many GPUs: over free GPU-seconds it is the better one.
    assert busy["stranded_gpus_mean"] == 2 and idle["stranded_gpus_mean"] == 4
    assert busy["fragmentation_gpu_seconds"] == round(20 / (5 * 6 + 5 * 46), 3)
    assert idle["fragmentation_gpu_seconds"] == round(40 / 440, 3)
    assert busy["fragmentation_gpu_seconds"] < idle["fragmentation_gpu_seconds"]
