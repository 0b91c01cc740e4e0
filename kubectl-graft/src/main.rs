//! kubectl graft: a kubectl plugin (kubectl runs `kubectl-graft` from PATH for `kubectl graft`)
//! that finds graft's pod on a node and runs graftctl there with `kubectl exec`. It needs
//! nothing but the kubectl an operator already has, and the same access: get pods in graft's
//! namespace (and the explained pod's), and exec into graft's pods.

mod args;
#[cfg(test)]
mod fake;
mod kubectl;
mod plan;

use args::{Args, USAGE};

fn main() {
    let code = match Args::parse(std::env::args().skip(1)) {
        Ok(a) if a.help => {
            print!("{USAGE}");
            0
        }
        Ok(a) => match plan::run(&mut kubectl::Real::from_env(), &a) {
            Ok(code) => code,
            Err(e) => fail(&e),
        },
        Err(e) => fail(&e),
    };
    std::process::exit(code);
}

fn fail(e: &anyhow::Error) -> i32 {
    eprintln!("kubectl graft: {e:#}");
    1
}
