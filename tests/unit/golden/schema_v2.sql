CREATE TABLE amends_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)
CREATE TABLE compensations (reversal_id TEXT NOT NULL, step_id TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, detail TEXT, data TEXT NOT NULL, generation INTEGER NOT NULL, updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (reversal_id, step_id))
CREATE TABLE events (event_id INTEGER PRIMARY KEY AUTOINCREMENT, saga_id TEXT NOT NULL, step_id TEXT, reversal_id TEXT, kind TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, prev_hash TEXT, hash TEXT)
CREATE TABLE idem_keys (tenant TEXT NOT NULL, key TEXT NOT NULL, request_hash TEXT NOT NULL, response TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, key))
CREATE TABLE resolutions (saga_id TEXT NOT NULL, step_id TEXT NOT NULL, by_who TEXT NOT NULL, note TEXT, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (saga_id, step_id))
CREATE TABLE reversals (reversal_id TEXT PRIMARY KEY, saga_id TEXT NOT NULL UNIQUE, state TEXT NOT NULL, budget TEXT NOT NULL, owner TEXT, generation INTEGER NOT NULL, lease_until DOUBLE PRECISION, requested_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, calls_spent INTEGER NOT NULL DEFAULT 0, tokens_spent INTEGER NOT NULL DEFAULT 0, report TEXT, continuations INTEGER NOT NULL DEFAULT 0, report_hash TEXT)
CREATE TABLE sagas (saga_id TEXT PRIMARY KEY, title TEXT NOT NULL, tenant TEXT, actor TEXT, state TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, owner TEXT, lease_until DOUBLE PRECISION, meta TEXT NOT NULL DEFAULT '{}')
CREATE TABLE steps (saga_id TEXT NOT NULL, step_id TEXT NOT NULL, seq INTEGER NOT NULL, tool TEXT NOT NULL, args TEXT NOT NULL, deps TEXT NOT NULL, resources TEXT NOT NULL, declared TEXT NOT NULL, effective TEXT, state TEXT NOT NULL, result TEXT, inverse TEXT, expectation TEXT, residue TEXT NOT NULL, acknowledgement TEXT, violation TEXT, error TEXT, started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, PRIMARY KEY (saga_id, step_id))
CREATE INDEX events_saga ON events (saga_id, event_id)
CREATE INDEX idem_expires ON idem_keys (expires_at)
CREATE INDEX reversals_running ON reversals (lease_until) WHERE state='running'
CREATE INDEX sagas_created ON sagas (created_at)
CREATE INDEX sagas_running ON sagas (lease_until) WHERE state='running'
CREATE INDEX sagas_tenant_created ON sagas (tenant, created_at)
CREATE INDEX steps_intent ON steps (saga_id) WHERE state='intent'
