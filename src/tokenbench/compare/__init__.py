"""Two runs side by side, a module per question: ``levels`` (the rows, their intervals and crossovers, the table),
``sessions`` (two agent-session runs turn by turn), ``capacity`` (two capacities under their SLOs), ``sides`` (what
the two sides are: names, models, shapes), ``effective`` (how long N agents take on each box) and ``runs``
(``compare_runs``, the command's one call that assembles them). Import each name from its module."""
