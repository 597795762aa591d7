-- tickwork owner-local: error summaries. Applied by the runtime itself on
-- first open, like 0002. Existing rows keep every value: their error_json is
-- NULL, "no error kept", which is what tickwork knew of them.
--
-- * error_json: what the latest ended attempt's executor raised, as JSON
--   {type, message, traceback} (at most 200, 2,000 and 8,000 characters),
--   or NULL when it did not raise. History entries keep its short line
--   ("Type: message", at most 300 characters) as their "error".
ALTER TABLE tickwork_jobs ADD COLUMN error_json TEXT;
