//! Layer-wise inference in chunks of nodes, with layer outputs in a scratch file, computes
//! what one forward pass over the whole graph computes (f64, Cora, every architecture).

use std::path::PathBuf;

use graphloom_comm::Local;
use graphloom_convert::planetoid;
use graphloom_nn::inference::{infer, infer_layerwise, InferenceInput, LayerwiseConfig, Output};
use graphloom_nn::{Architecture, GraphInput, Model, ModelConfig, NodeGraph};
use graphloom_store::{Layout, Location, StoreSpec, StoreTensor};
use graphloom_tensor::{DType, Var};

#[test]
fn chunked_inference_through_a_scratch_file_equals_the_whole_graph_pass() {
    let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/planetoid");
    let ds = planetoid::convert(&raw, "cora").unwrap();
    let scratch = std::env::temp_dir().join(format!("graphloom-layerwise-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let x = ds.features.cast(DType::F64).unwrap();
    for arch in [Architecture::Gcn, Architecture::Sage, Architecture::Gat] {
        let cfg = ModelConfig {
            arch,
            in_dim: ds.meta.feat_dim,
            out_dim: ds.meta.num_classes,
            hidden: 16,
            heads: 4,
            out_heads: 1,
            layers: 3,
            dtype: DType::F64,
            ..Default::default()
        };
        let model = Model::new(cfg, 3).unwrap();
        let graph = NodeGraph::in_memory(arch, &ds.graph, None, None).unwrap();
        let params: Vec<_> = model.params.iter().map(|p| p.value.clone()).collect();
        let whole = infer(
            &model,
            &Var::constant(x.clone()),
            GraphInput::Nodes(&graph),
            &params,
            Output::LogProbabilities,
        )
        .unwrap()
        .to_vec_f64();
        // 128 KiB: Cora's layer outputs (2708 x 16 or more in f64) go to scratch files, and
        // each layer runs in many chunks.
        let layerwise = LayerwiseConfig {
            memory_bytes: 128 << 10,
            scratch_dir: scratch.clone(),
        };
        let rows = Local::run(1, |comm| {
            let spec = StoreSpec::new(x.shape(), DType::F64, Layout::Continuous, Location::Host);
            let mut table = StoreTensor::new(comm, spec)?;
            table.fill_from_whole(x.as_bytes())?;
            let out = infer_layerwise(
                &model,
                ds.data(),
                InferenceInput::Rows(&table),
                &params,
                Output::LogProbabilities,
                &layerwise,
            )
            .unwrap();
            assert!(
                out.in_file() && out.chunks() >= 4,
                "{arch:?}: {} chunks",
                out.chunks()
            );
            Ok::<_, graphloom_store::StoreError>(out.to_tensor().unwrap().to_vec_f64())
        })
        .remove(0)
        .unwrap();
        assert_eq!(rows.len(), whole.len());
        let worst = rows
            .iter()
            .zip(&whole)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-9, "{arch:?}: differs by {worst}");
    }
    // The scratch files are gone.
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    std::fs::remove_dir_all(&scratch).unwrap();
}
