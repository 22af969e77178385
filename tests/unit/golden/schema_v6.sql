CREATE VIEW compensations AS SELECT c.reversal_id, c.step_id, json_extract(c.body, '$.state') AS state, json_extract(c.body, '$.attempts') AS attempts, json_extract(c.body, '$.detail') AS detail, json_extract(c.body, '$.data') AS data, json_extract(c.body, '$.generation') AS generation, c.at AS updated_at FROM records c WHERE c.phase = 'c' AND c.rec_id = (SELECT max(x.rec_id) FROM records x WHERE x.reversal_id = c.reversal_id AND x.step_id = c.step_id AND x.phase = 'c')
CREATE VIEW events AS SELECT rec_id AS event_id, saga_id, step_id, reversal_id, kind, at, body AS data, prev_hash, hash FROM records
CREATE VIEW steps AS SELECT i.saga_id, i.step_id, json_extract(i.body, '$.seq') AS seq, json_extract(i.body, '$.tool') AS tool, json_extract(i.body, '$.args') AS args, json_extract(i.body, '$.deps') AS deps, json_extract(i.body, '$.resources') AS resources, json_extract(i.body, '$.declared') AS declared, json_extract(f.body, '$.effective') AS effective, COALESCE(json_extract(f.body, '$.state'), CASE i.kind WHEN 'step.cancelled' THEN 'cancelled' ELSE 'intent' END) AS state, json_extract(f.body, '$.result') AS result, json_extract(f.body, '$.inverse') AS inverse, json_extract(f.body, '$.expectation') AS expectation, json_extract(f.body, '$.residue') AS residue, json_extract(f.body, '$.acknowledgement') AS acknowledgement, json_extract(f.body, '$.violation') AS violation, json_extract(f.body, '$.error') AS error, i.at AS started_at, f.at AS finished_at FROM records i LEFT JOIN records f ON f.rec_id = (SELECT max(x.rec_id) FROM records x WHERE x.saga_id = i.saga_id AND x.step_id = i.step_id AND x.phase = 'f') WHERE i.phase = 'i'
CREATE TABLE amends_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)
CREATE TABLE idem_keys (tenant TEXT NOT NULL, key TEXT NOT NULL, request_hash TEXT NOT NULL, response TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, key))
CREATE TABLE log_heads (shard INTEGER PRIMARY KEY, n INTEGER NOT NULL, head TEXT NOT NULL)
CREATE TABLE log_tally (shard INTEGER PRIMARY KEY, n INTEGER NOT NULL, acc TEXT NOT NULL)
CREATE TABLE records (rec_id INTEGER PRIMARY KEY AUTOINCREMENT, saga_id TEXT NOT NULL, step_id TEXT, reversal_id TEXT, kind TEXT NOT NULL, phase TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, prev_hash TEXT, hash TEXT)
CREATE TABLE reversals (reversal_id TEXT PRIMARY KEY, saga_id TEXT NOT NULL UNIQUE, state TEXT NOT NULL, budget TEXT NOT NULL, owner TEXT, generation INTEGER NOT NULL, lease_until DOUBLE PRECISION, requested_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, calls_spent INTEGER NOT NULL DEFAULT 0, tokens_spent INTEGER NOT NULL DEFAULT 0, report TEXT, continuations INTEGER NOT NULL DEFAULT 0, report_hash TEXT)
CREATE TABLE sagas (saga_id TEXT PRIMARY KEY, title TEXT NOT NULL, tenant TEXT, actor TEXT, state TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, owner TEXT, lease_until DOUBLE PRECISION, meta TEXT NOT NULL DEFAULT '{}', head TEXT)
CREATE INDEX idem_expires ON idem_keys (expires_at)
CREATE INDEX records_anchors ON records (rec_id, reversal_id, kind) WHERE (reversal_id IS NOT NULL OR kind = 'saga.started')
CREATE INDEX records_comp ON records (reversal_id, rec_id) WHERE phase='c'
CREATE INDEX records_in_doubt ON records (saga_id) WHERE kind='step.in_doubt'
CREATE INDEX records_saga ON records (saga_id, rec_id)
CREATE INDEX reversals_running ON reversals (lease_until) WHERE state='running'
CREATE INDEX sagas_created ON sagas (created_at)
CREATE INDEX sagas_running ON sagas (lease_until) WHERE state='running'
CREATE INDEX sagas_tenant_created ON sagas (tenant, created_at)
