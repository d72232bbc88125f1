//! The `kudurru` binary: parse flags, dispatch, map errors to exit codes.

use clap::Parser;
use kudurru_control::cli::{Cli, Command, ConfigCommand};
use kudurru_control::{config, lameduck, serve};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => match serve::run(&args) {
            Ok(()) => serve::exit::OK,
            Err(e) => {
                eprintln!("kudurru: {e}");
                e.exit_code()
            }
        },
        Command::Lameduck(args) => match lameduck::run(&args) {
            Ok(state) => {
                println!("{state}");
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru lameduck: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Config {
            command: ConfigCommand::Keys,
        } => {
            print!("{}", config::render_key_table());
            serve::exit::OK
        }
        Command::Config {
            command: ConfigCommand::Show(args),
        } => match serve::effective_config(&args) {
            Ok(c) => {
                print!("{}", toml::to_string_pretty(&c).unwrap_or_default());
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru: {e}");
                serve::exit::CONFIG
            }
        },
    };
    std::process::exit(code);
}
