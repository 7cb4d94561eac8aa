"""Where a gang goes, against a view of the counters (the algorithm: ``planner.py``):

    eligibility.py  where a pod may run: the node filters of kube-scheduler railyard models.
    packing.py      how a gang's pods fill nodes: the building blocks of planner and slices.
    slices.py       slices: every run of S consecutive ranks inside one domain of a level.
    rails.py        rail-aligned placement of a gang's partial-node members.
    levels.py       the levels a gang's request names and where it may land, per pool of a
                    cluster with several fabrics.
    planner.py      whole-gang placement: the narrowest level, best fit, ranks in order.
    capacity.py     whether a gang's request exceeds the free GPUs at all: one pass, no plan.
    homes.py        where a running gang's new round (replacements) is planned first.
    address.py      where each planned member sits: rank, slice, domain per level, rails.
"""
