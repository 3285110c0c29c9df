"""``Store``: the history database behind one SQLAlchemy engine (SQLite or PostgreSQL).

Writes (``record_run``, ``record_baseline``, ``record_promotion``) each run in one transaction
and turn state changes into event rows. Reads return the plain records of ``records.py``.
Migrations are Alembic's, configured in code with the scripts inside this package.
Every statement is time-limited (``health.limit``): reads by ``read_timeout_s`` (what ``/readyz``,
``/metrics`` and the pages wait at most), writes by ``write_timeout_s`` (after which the result goes
to the spool), so a database that hangs never holds a thread, nor SIGTERM, for longer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from alembic.config import Config
from sqlalchemy import Engine, event, make_url, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, DisconnectionError, IntegrityError
from sqlalchemy.orm import Session

from monitor.config.dburl import mask_url
from monitor.config.settings import StoreConfig
from monitor.results import CheckResult
from monitor.store import (
    baseline_writes,
    convert,
    events,
    health,
    leases,
    migrate,
    queries,
    recent,
    retention,
    schema,
    text,
    writes,
)
from monitor.store.engine import make_engine
from monitor.store.recent import RecentState
from monitor.store.records import (
    BaselineRecord,
    EnvironmentRecord,
    EventRecord,
    HistoryItem,
    PruneStats,
    RunRecord,
)

log = logging.getLogger("onnxmon.store")


class Store:
    """The durable history: runs, output metrics, baselines, environments and events."""

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        read_timeout_s: float = 3.0,
        write_timeout_s: float = 10.0,
        migrate_timeout_s: float = 120.0,
    ) -> None:
        self.url = url
        self.read_timeout_s = read_timeout_s
        self.write_timeout_s = write_timeout_s
        self.migrate_timeout_s = migrate_timeout_s  # the longest wait for the schema lock (migrate.py)
        self.problem: str | None = None  # what the last health check found (logged when it changes)
        self.text_replaced = 0  # results stored with a character replaced (store/text.py), since start
        self._latest_cache: dict[int, RunRecord] = {}
        self._file = health.FileWatch.of(url)
        self.engine: Engine = make_engine(url, echo=echo, write_timeout_s=write_timeout_s)
        if self.engine.dialect.name == "sqlite" and self._file is not None:
            event.listen(self.engine, "connect", lambda *_: self._file.remember() if self._file else None)

    @classmethod
    def configured(cls, store: StoreConfig) -> Store:
        """The store of ``store.url`` with the configured read, write and migration time limits."""
        return cls(
            store.url,
            read_timeout_s=store.read_timeout,
            write_timeout_s=store.write_timeout,
            migrate_timeout_s=store.migrate_timeout,
        )

    @property
    def display_url(self) -> str:
        """The URL with any password masked (``user:***@`` and ``?password=***``), for messages and logs."""
        return mask_url(make_url(self.url).render_as_string(hide_password=True))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- schema -------------------------------------------------------------------------------

    def migration_config(self, connection: Connection) -> Config:
        """An Alembic config bound to ``connection`` (no ini file; scripts live in the package)."""
        return migrate.config(connection)

    def upgrade(self, revision: str = "head") -> None:
        """Bring the schema to ``revision``: atomic, one migrator at a time, time-limited (``migrate.py``).

        ``SchemaTooNew`` when the database is at a revision this onnxmon does not know.
        """
        migrate.upgrade(self, revision)

    def current_revision(self) -> str | None:
        """The revision the database is at, ``None`` for an empty database (read within ``read_timeout_s``)."""
        return migrate.current(self)

    def known_revision(self) -> str | None:
        """``current_revision``, or ``SchemaTooNew`` when this onnxmon does not know it (a newer one wrote it)."""
        revision = self.current_revision()
        if not migrate.known(revision):
            raise migrate.too_new(self, str(revision))
        return revision

    def head_revision(self) -> str | None:
        """The newest revision shipped with this version of onnxmon."""
        return migrate.head()

    def ping(self) -> bool:
        """True when the database answers in time, has its schema and (SQLite) is still the same file."""
        return self.health() is None

    def health(self) -> str | None:
        """None when the database is usable; else why not, in one line (logged when it changes)."""
        problem = self._file.check() if self._file is not None else None
        if problem is None:
            try:
                with self._session() as session:
                    problem = health.probe(session.connection())
            except Exception as exc:  # any failure means "not usable"; callers report, never crash
                problem = health.describe(exc)
        if problem != self.problem:
            if problem is None:
                log.info("history database %s usable again", self.display_url)
            else:
                log.error("history database %s not usable: %s", self.display_url, problem)
        self.problem = problem
        return problem

    @contextmanager
    def _session(self, *, write: bool = False, unbounded: bool = False) -> Iterator[Session]:
        """One transaction; reads and writes each under their time limit (``unbounded``: none, for pruning)."""
        if write and self._file is not None and (gone := self._file.check()):
            raise health.StoreUnavailable(gone)
        timeout = None if unbounded else self.write_timeout_s if write else self.read_timeout_s
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                health.limit(session.connection(), timeout)
                yield session
        except DBAPIError as exc:
            if write and health.schema_missing(exc):
                raise health.StoreUnavailable(
                    f"the database has no onnxmon schema (empty or recreated): {health.UPGRADE_HINT}"
                ) from exc
            outage = health.translated(exc)
            if outage is exc:
                raise
            raise outage from exc
        except DisconnectionError as exc:
            raise health.StoreOutage(health.describe(exc)) from exc

    # --- writes -------------------------------------------------------------------------------

    def record_run(
        self,
        result: CheckResult,
        *,
        node: str | None = None,
        pod: str | None = None,
        key: str | None = None,
        candidate: bool = False,
    ) -> int:
        """Store one check result; upsert its model and environment; write events for state changes.

        State changes compare with the previous run of the same model on the same node; the node
        and pod come from the arguments or else from the environment snapshot (``k8s.node``).
        ``key`` is the run's identity (a spool entry's): a run already stored under it is not
        written again, its id is returned, so a write-back repeated after a crash stays exactly once.
        A ``candidate`` run (a rehearsal on another stack) is stored and shown, but is never the
        model's latest run and makes no events: production's history, alerts and metrics ignore it.
        """
        node = node or convert.replica(result.environment, "node")
        pod = pod or convert.replica(result.environment, "pod")
        at = convert.utc(result.started_at)
        if text.needs_replacing([result.to_dict(), node, pod]):  # kept, never lost: replaced, counted, logged
            self.text_replaced += 1
            log.warning("run of %r stored with characters the store cannot hold replaced by U+FFFD", result.model)
        try:
            return self._record_run(result, node, pod, at, key, candidate)
        except IntegrityError:
            if key is None:
                raise
            # another process wrote the same spool entry back meanwhile (it commits first): written once, as asked
            with self._session() as session:
                stored = session.scalar(select(schema.Run.id).where(schema.Run.run_key == key))
            if stored is None:
                raise
            return stored

    def _record_run(
        self, result: CheckResult, node: str | None, pod: str | None, at: datetime, key: str | None, candidate: bool
    ) -> int:
        with self._session(write=True) as session:
            if key is not None and (stored := session.scalar(select(schema.Run.id).where(schema.Run.run_key == key))):
                return stored
            model_id = writes.model_id(session, result.model, at, result.model_sha256)
            current = events.state_of(result)
            if current.environment_fingerprint:
                writes.touch_environment(session, current.environment_fingerprint, result.environment, at)
            previous = writes.previous_state(session, model_id, node or "")
            run = convert.run_row(result, model_id, node, pod)
            run.run_key = key
            run.candidate = candidate
            session.add(run)
            session.flush()
            session.add_all(convert.output_row(o, run.id) for o in result.outputs)
            if candidate:
                return run.id
            for draft in events.changes(previous, current, result):
                session.add(
                    schema.Event(
                        model_id=model_id,
                        node=node or "",
                        kind=draft.kind,
                        at=at,
                        run_id=run.id,
                        old=draft.old,
                        new=draft.new,
                        detail=dict(draft.detail),
                    )
                )
            writes.point_latest(session, model_id, node or "", run.id)
            writes.add_diagnosis(session, run.id, model_id, result.details.get("diagnosis"), at)
            return run.id

    def record_baseline(self, meta: Mapping[str, Any]) -> None:
        """Record (or refresh) a baseline from its metadata; a new one writes ``baseline_captured``.

        Keys: ``baseline_id``, ``model``, ``created_at`` (ISO), ``source``, ``model_sha256``,
        ``benchset``, ``benchset_sha256``, ``environment`` (snapshot or None), ``path``, ``run_id``.
        A ``run_id`` this store does not know is recorded as unknown (``None``). ``active: True``
        (with optional ``promoted_by``/``promoted_at``) mirrors a baseline already active on disk.
        """
        created = baseline_writes.created_at(meta)
        with self._session(write=True) as session:
            baseline_writes.record(session, meta, created)

    def record_promotion(
        self, model: str, baseline_id: str, by: str, *, at: datetime | None = None, note: str = ""
    ) -> None:
        """Make ``baseline_id`` the active baseline of ``model`` and write ``baseline_promoted``.

        Idempotent: promoting the baseline that is already active writes nothing.
        """
        at = at or datetime.now(UTC)
        with self._session(write=True) as session:
            baseline_writes.promote(session, model, baseline_id, by, at=at, note=note)

    def claim(self, model: str, slot: int, holder: str) -> bool:
        """Take the lease of ``model`` for schedule ``slot`` (sharded replicas); False if taken."""
        now = datetime.now(UTC)
        with self._session(write=True) as session:
            leases.prune(session, now - leases.KEEP)
            return leases.claim(session, model, slot, holder, now)

    def prune(
        self,
        *,
        passing_older_than: timedelta,
        failures_older_than: timedelta,
        events_older_than: timedelta | None = None,
        now: datetime | None = None,
    ) -> PruneStats:
        """Delete old runs (passing ones sooner than failures) and, if asked, old events.

        Never deletes a run a baseline came from, nor the latest run of a model on a node.
        """
        with self._session(write=True, unbounded=True) as session:
            return retention.prune(
                session,
                now=now or datetime.now(UTC),
                passing_older_than=passing_older_than,
                failures_older_than=failures_older_than,
                events_older_than=events_older_than,
            )

    # --- reads --------------------------------------------------------------------------------

    def models(self) -> list[str]:
        """Names of every model with stored history, sorted."""
        with self._session() as session:
            return list(session.scalars(select(schema.Model.name).order_by(schema.Model.name)))

    def history(
        self, model: str, *, since: datetime | None = None, limit: int = 200, node: str | None = None
    ) -> list[HistoryItem]:
        """The newest ``limit`` runs of ``model`` with the events of the same period, newest first."""
        with self._session() as session:
            return queries.history(session, model, since=since, limit=limit, node=node)

    def runs(
        self,
        model: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        node: str | None = None,
        limit: int = 200,
        candidates: bool | None = False,
    ) -> list[RunRecord]:
        """Runs of ``model``, newest first, without their outputs (production's; ``candidates``: see queries)."""
        with self._session() as session:
            return queries.runs(session, model, since=since, until=until, node=node, limit=limit, candidates=candidates)

    def run(self, run_id: int) -> RunRecord | None:
        """One run with every output's metrics."""
        with self._session() as session:
            return queries.run(session, run_id)

    def latest_per_model(self) -> list[RunRecord]:
        """The newest run of every model on every node, with outputs (read at every ``/metrics`` scrape).

        Runs are immutable, so the records of runs already read are kept (bounded) and only
        runs newer than the last call are loaded.
        """
        with self._session() as session:
            records = queries.latest_per_model(session, self._latest_cache)
        self._latest_cache = {r.id: r for r in records}
        return records

    def recent_states(self, models: Iterable[str], node: str | None) -> dict[str, RecentState]:
        """What the alert rules count for each model on ``node``: last runs and last changes (``recent.py``)."""
        with self._session() as session:
            return recent.recent_states(session, models, node)

    def events(
        self,
        *,
        model: str | None = None,
        since: datetime | None = None,
        kind: str | None = None,
        node: str | None = None,
        limit: int = 500,
    ) -> list[EventRecord]:
        """Events, newest first (``node``: only that node's; ``""`` is a run without a node)."""
        with self._session() as session:
            return queries.events(session, model=model, since=since, kind=kind, node=node, limit=limit)

    def baseline_history(self, model: str) -> list[BaselineRecord]:
        """Every baseline of ``model``, oldest first: provenance, environment, whether active."""
        with self._session() as session:
            return queries.baseline_history(session, model)

    def environment(self, fingerprint: str) -> dict[str, Any] | None:
        """The snapshot stored under ``fingerprint``."""
        with self._session() as session:
            row = session.scalars(select(schema.Environment).filter_by(fingerprint=fingerprint)).first()
            return dict(row.snapshot) if row else None

    def find_environments(self, prefix: str, *, limit: int = 20) -> list[EnvironmentRecord]:
        """Environments whose fingerprint starts with ``prefix`` (for ``env diff abc12 def34``)."""
        with self._session() as session:
            return queries.find_environments(session, prefix, limit=limit)
