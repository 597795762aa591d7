"""The public model: jobs as callers hand them in and as the engine reports
them, the outcomes an executor returns, the abort signal it watches, and the
errors every operation raises on bad input."""
