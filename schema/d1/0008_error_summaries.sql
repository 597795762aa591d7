-- tickwork: error summaries, for Cloudflare D1 (SQLite). Apply after 0007.
-- Plain statements only (D1 applies the file as one unit). Existing rows
-- keep every value: their error_json is NULL, "no error kept".
--
-- * error_json: what the latest ended attempt's executor raised, as JSON
--   {type, message, traceback} (at most 200, 2,000 and 8,000 characters),
--   or NULL when it did not raise. History entries keep its short line
--   ("Type: message", at most 300 characters) as their "error".
ALTER TABLE tickwork_jobs ADD COLUMN error_json TEXT
    CHECK (error_json IS NULL OR json_valid(error_json));

UPDATE tickwork_meta SET value = '8' WHERE key = 'schema_version';
