"""The train stream: train.seed changes which tasks come first (RL seeds see different tasks),
env.seed alone fixes the pool, and a stream resumes where it stopped."""
from rlyard.data import TaskStream, stream_seed, train_stream
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
