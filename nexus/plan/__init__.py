"""Query planning: the binder (`logical`), the planner (`physical`), the cost model both the
planner and the executor choice use (`cost`), and EXPLAIN (`explain`)."""
