import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chaos.checks import RunResult
from chaos.ha import missing_programs
from chaos.scenarios import SCENARIOS, ProviderInProgress409, run_scenario
from chaos.world import HaWorld, World
from config.processes import stop_like_ctrl_c


class Command(BaseCommand):
    help = ("Run the failure-injection matrix against real processes (a scratch PostgreSQL cluster, the "
            "sandbox provider, django-q2 clusters) and print a table; exit 1 if any run fails.")
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--runs-per-point", type=int, default=3)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                            help="run only this scenario (repeatable); default: all")
        parser.add_argument("--json", dest="json_path", help="write the report as JSON to this path")
        parser.add_argument("--random-minutes", type=float, default=0,
                            help="keep running the random-kill scenario for this many minutes")
        parser.add_argument("--keep", action="store_true", help="keep the scratch world's folder (logs, cluster)")
        parser.add_argument("--jobs", type=int, default=None,
                            help=f"jobs per run of {ProviderInProgress409.name} "
                                 f"(default {ProviderInProgress409.jobs})")

    def handle(self, *args, runs_per_point, seed, scenario, json_path, random_minutes, keep, jobs, **options):
        if runs_per_point < 1:
            raise CommandError("--runs-per-point must be at least 1")
        if jobs is not None:
            if jobs < 1:
                raise CommandError("--jobs must be at least 1")
            SCENARIOS[ProviderInProgress409.name].jobs = jobs
        names = scenario or list(SCENARIOS)
        stop_like_ctrl_c()  # the finally below tears the world down
        logging.getLogger("django-q").setLevel(logging.WARNING)  # one line per enqueue drowns the table
        single = [name for name in names if not SCENARIOS[name].needs_ha]
        on_ha = [name for name in names if SCENARIOS[name].needs_ha]
        started = time.monotonic()
        results: list[RunResult] = []
        # The scenarios of a highly available PostgreSQL run in a world of their own: a Patroni cluster.
        if on_ha:
            if missing := missing_programs():
                raise CommandError(f"{', '.join(on_ha)} need Debian's {' and '.join(missing)} "
                                   f"(apt-get install {' '.join(missing)})")
            ha_world = HaWorld()
            try:
                ha_world.start()
                self.stdout.write(f"HA world in {ha_world.workdir} (Patroni, {len(ha_world.ha.nodes)} nodes: "
                                  f"{ha_world.ha.hosts()}; sandbox at {ha_world.sandbox.url}); seed {seed}")
                for name in on_ha:
                    begun = time.monotonic()
                    runs = run_scenario(ha_world, SCENARIOS[name], runs=runs_per_point, seed=seed)
                    results += runs
                    self._progress(name, runs, time.monotonic() - begun)
            finally:
                ha_world.close(keep=keep)
        world = World().start() if single or random_minutes else None
        if world is not None:
            self.stdout.write(f"scratch world in {world.workdir} (PostgreSQL on port {world.cluster.port}, "
                              f"sandbox at {world.sandbox.url}); seed {seed}")
        try:
            for name in single:
                begun = time.monotonic()
                runs = run_scenario(world, SCENARIOS[name], runs=runs_per_point, seed=seed)
                results += runs
                self._progress(name, runs, time.monotonic() - begun)
            deadline = time.monotonic() + random_minutes * 60
            extra = 0
            while time.monotonic() < deadline:
                begun = time.monotonic()
                runs = run_scenario(world, SCENARIOS["random_kills"], runs=1, seed=seed + 1 + extra)
                extra += 1
                results += runs
                self._progress("random_kills", runs, time.monotonic() - begun)
        finally:
            if world is not None:
                world.close(keep=keep)
        rows = summarise(results)
        self.stdout.write("\n" + table(rows))
        self.stdout.write(f"\n{len(results)} runs in {time.monotonic() - started:.0f} s, seed {seed}")
        if json_path:
            Path(json_path).write_text(json.dumps({"seed": seed, "runs_per_point": runs_per_point, "summary": rows,
                                                   "runs": [asdict(r) | {"passed": r.passed} for r in results]},
                                                  indent=2))
        failed = [r for r in results if not r.passed]
        if failed:
            for r in failed:
                self.stderr.write(f"FAILED {r.scenario} run {r.run} (seed {r.seed}): {r.error} {r.expectations} "
                                  f"dup={r.duplicate_effects} lost={r.lost_jobs} stale={r.stale_writes_accepted} "
                                  f"violations={r.ledger_violations}")
            raise CommandError(f"{len(failed)} of {len(results)} chaos runs failed (seed {seed})")

    def _progress(self, name, runs, seconds):
        passed = sum(r.passed for r in runs)
        figures = figures_of(runs)
        counted = ("  " + ", ".join(f"{key} {value}" for key, value in figures.items())) if figures else ""
        self.stdout.write(f"  {name:<30} {passed}/{len(runs)} passed in {seconds:.1f} s{counted}")
        self.stdout.flush()


def summarise(results: list[RunResult]) -> list[dict]:
    rows = {}
    for r in results:
        row = rows.setdefault(r.scenario, {"scenario": r.scenario, "runs": 0, "passed": 0, "duplicate_effects": 0,
                                           "lost_jobs": 0, "stale_writes_accepted": 0, "recover_seconds": []})
        row["runs"] += 1
        row["passed"] += r.passed
        row["duplicate_effects"] += r.duplicate_effects
        row["lost_jobs"] += r.lost_jobs
        row["stale_writes_accepted"] += r.stale_writes_accepted
        row["recover_seconds"].append(r.recover_seconds)
    for row in rows.values():
        if figures := figures_of([r for r in results if r.scenario == row["scenario"]]):
            row["figures"] = figures
        times = sorted(row.pop("recover_seconds"))
        row["recover_median_s"] = round(times[len(times) // 2], 2)
        row["recover_max_s"] = round(times[-1], 2)
    return list(rows.values())


def figures_of(results: list[RunResult]) -> dict:
    """What the runs counted (a scenario's `figures`), summed over the runs."""
    total: dict = {}
    for r in results:
        for key, value in r.figures.items():
            total[key] = total.get(key, 0) + value
    return total


def table(rows: list[dict]) -> str:
    head = f"{'scenario':<30} {'runs':>5} {'pass':>5} {'dup':>4} {'lost':>5} {'stale':>6} {'recover med/max s':>18}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['scenario']:<30} {r['runs']:>5} {r['passed']:>5} {r['duplicate_effects']:>4} "
                     f"{r['lost_jobs']:>5} {r['stale_writes_accepted']:>6} "
                     f"{r['recover_median_s']:>8.1f} / {r['recover_max_s']:<7.1f}")
    return "\n".join(lines)


