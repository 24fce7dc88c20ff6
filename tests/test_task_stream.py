"""The train stream: train.seed changes which tasks come first (RL seeds see different tasks),
env.seed alone fixes the pool, and a stream resumes where it stopped."""
from rlyard.data import TaskStream, run_tasks, stream_seed, train_pool, train_stream
from rlyard.types import Task


def tasks(count: int) -> list[Task]:
    return [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"task {i}"}], env="test") for i in range(count)]


def test_train_seed_zero_keeps_the_env_seeds_order():
    assert stream_seed(7, 0) == 7
    pool = tasks(50)
    assert [t.id for t in train_stream(pool, 7, 0).next(20)] == [t.id for t in TaskStream(pool, seed=7).next(20)]


def test_other_train_seeds_draw_other_orders_from_the_same_pool():
    pool = tasks(50)
    orders = [[t.id for t in train_stream(pool, 0, seed).next(50)] for seed in (0, 1, 2)]
    assert len({tuple(order[:10]) for order in orders}) == 3
    assert all(sorted(order) == sorted(t.id for t in pool) for order in orders)  # one epoch: every task once
    assert len({stream_seed(env, train) for env in range(5) for train in range(5)}) == 25


def test_a_resumed_stream_draws_what_the_uninterrupted_one_would():
    pool = tasks(12)
    whole = [t.id for t in train_stream(pool, 3, 2).next(30)]
    first = train_stream(pool, 3, 2)
    head = [t.id for t in first.next(17)]
    resumed = train_stream(pool, 3, 2)
    resumed.load_state_dict(first.state_dict())
    assert head + [t.id for t in resumed.next(13)] == whole


def test_run_tasks_are_the_head_of_the_stream_a_run_builds():
    """What the benches feed a peer trainer (run_tasks) is what orchestrate/setup.build's stream
    hands out, for the run's env section and train.seed."""
    from rlyard.config import load_config
    from rlyard.envs import get_family

    config = load_config(None, ["env.name=arith", "env.train_size=40", "env.seed=3", "env.options.max_value=50"])
    family = get_family("arith")
    pool = train_pool(family, config.env)
    assert len(pool) == 40 and pool == family.make_tasks("train", 40, 3, max_value=50)
    for train_seed in (0, 2):
        want = [t.id for t in train_stream(pool, 3, train_seed).next(25)]
        assert [t.id for t in run_tasks(family, config.env, train_seed, 25)] == want
