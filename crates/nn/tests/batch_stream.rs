//! The batch stream in one stage and in two: batches in order, the first error ends the
//! stream, the sampler comes back, and a consumer that leaves early never hangs a producer.

use std::sync::atomic::{AtomicUsize, Ordering};

use graphloom_graph::sample::Sampler;
use graphloom_nn::batches::{producer_pool, BatchStream, StreamSettings};

fn settings(batches: usize, depth: usize, pooled: bool) -> StreamSettings {
    StreamSettings {
        batches,
        depth,
        sampler: Sampler::new(10),
        pool: pooled.then(|| producer_pool(3).unwrap()),
    }
}

#[test]
fn two_stages_give_the_batches_of_one_in_order() {
    for pooled in [false, true] {
        let one: Vec<usize> = std::thread::scope(|scope| {
            let stream = BatchStream::<usize, String>::scoped(
                scope,
                settings(50, 2, pooled),
                |_: &mut Sampler, i| Ok(i * i + 1),
            )
            .unwrap();
            stream.map(Result::unwrap).collect()
        });
        let finished = AtomicUsize::new(0);
        let two: Vec<usize> = std::thread::scope(|scope| {
            let mut stream = BatchStream::<usize, String>::scoped_in_stages(
                scope,
                settings(50, 2, pooled),
                |_: &mut Sampler, i| Ok(i * i),
                |half: usize| {
                    // The second stage sees the batches in order.
                    let k = finished.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(half, k * k);
                    Ok(half + 1)
                },
            )
            .unwrap();
            let got: Vec<usize> = stream.by_ref().map(Result::unwrap).collect();
            stream.finish().unwrap();
            got
        });
        assert_eq!(one, two);
        assert_eq!(two.len(), 50);
    }
}

#[test]
fn an_error_in_either_stage_ends_the_stream_after_the_batches_before_it() {
    for failing_stage in [1, 2] {
        let got: Vec<Result<usize, String>> = std::thread::scope(|scope| {
            let stream = BatchStream::scoped_in_stages(
                scope,
                settings(20, 3, false),
                |_: &mut Sampler, i| {
                    if failing_stage == 1 && i == 5 {
                        Err(format!("sampling batch {i} failed"))
                    } else {
                        Ok(i)
                    }
                },
                |i: usize| {
                    if failing_stage == 2 && i == 5 {
                        Err(format!("gathering batch {i} failed"))
                    } else {
                        Ok(i)
                    }
                },
            )
            .unwrap();
            stream.collect()
        });
        assert_eq!(got.len(), 6, "stage {failing_stage}");
        assert!(got[..5].iter().all(Result::is_ok));
        assert!(got[5].as_ref().unwrap_err().contains("batch 5 failed"));
    }
}

#[test]
fn a_consumer_that_leaves_early_ends_both_stages() {
    let made = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let mut stream = BatchStream::<usize, String>::scoped_in_stages(
            scope,
            settings(1_000_000, 2, true),
            |_: &mut Sampler, i| {
                made.fetch_add(1, Ordering::SeqCst);
                Ok(i)
            },
            Ok,
        )
        .unwrap();
        assert_eq!(stream.next().unwrap().unwrap(), 0);
        // Dropped here with both stages busy or blocked on full queues.
    });
    // The queues bound how far ahead the stages got.
    assert!(made.load(Ordering::SeqCst) < 10);
}
