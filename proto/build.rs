//! Generates the bindings into OUT_DIR. NRI (ttrpc) uses a pure-Rust parser, so it needs no
//! `protoc`; the kubelet protocols (feature `kubelet`, tonic) are compiled with `protoc`.

use std::{fs, io, path::Path};

use ttrpc_codegen::{Codegen, Customize, ProtobufCustomize};

fn main() -> io::Result<()> {
    let out = std::env::var("OUT_DIR").map_err(io::Error::other)?;
    println!("cargo:rerun-if-changed=nri/nri.proto");

    Codegen::new()
        .out_dir(&out)
        .include("nri")
        .input("nri/nri.proto")
        .rust_protobuf()
        .rust_protobuf_customize(ProtobufCustomize::default().gen_mod_rs(false))
        .customize(Customize {
            async_all: true,
            ..Default::default()
        })
        .run()?;

    // `include!` takes neither inner attributes nor inner doc comments; the including module
    // sets its own lints and docs.
    for name in ["nri.rs", "nri_ttrpc.rs"] {
        let path = Path::new(&out).join(name);
        let text = fs::read_to_string(&path)?;
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| {
                let l = l.trim_start();
                !l.starts_with("#![") && !l.starts_with("//!")
            })
            .collect();
        fs::write(&path, kept.join("\n"))?;
    }

    #[cfg(feature = "kubelet")]
    kubelet()?;
    Ok(())
}

#[cfg(feature = "kubelet")]
fn kubelet() -> io::Result<()> {
    let protos = [
        "kubelet/pluginregistration.proto",
        "kubelet/dra_v1.proto",
        "kubelet/dra_v1beta1.proto",
        "kubelet/dra_health_v1alpha1.proto",
        "kubelet/dra_health_v1.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&protos, &["kubelet"])
}
