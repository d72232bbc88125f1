//! The `kudurru` binary: parse flags, dispatch, map errors to exit codes.

use clap::Parser;
use kudurru_control::cli::{Cli, Command, ConfigCommand, SettingsCommand};
use kudurru_control::{config, lameduck, layers, serve};

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
            Ok((c, _)) => {
                print!("{}", toml::to_string_pretty(&c).unwrap_or_default());
                serve::exit::OK
            }
            Err(e) => {
                eprintln!("kudurru: {e}");
                serve::exit::CONFIG
            }
        },
        Command::Settings {
            command: SettingsCommand::Get { key, args },
        } => match serve::effective_config(&args) {
            Ok((c, sources)) => match layers::render_get(&c, &sources, key.as_deref()) {
                Ok(text) => {
                    print!("{text}");
                    serve::exit::OK
                }
                Err(e) => {
                    eprintln!("kudurru: {e}");
                    serve::exit::CONFIG
                }
            },
            Err(e) => {
                eprintln!("kudurru: {e}");
                serve::exit::CONFIG
            }
        },
    };
    std::process::exit(code);
}
