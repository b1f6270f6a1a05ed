//! `agent-runner sdk list`: each built-in adapter, its status and models.

use crate::sdks;

/// Prints what each built-in SDK would register.
pub async fn list() -> anyhow::Result<()> {
    let names: Vec<String> = sdks::BUILT_IN.iter().map(|s| (*s).to_owned()).collect();
    let all = sdks::Sdks::new(&names).map_err(anyhow::Error::msg)?;
    for d in all.describe_all().await {
        let status = format!("{:?}", d.status).to_lowercase();
        match &d.error_message {
            Some(why) => println!("{}  {status}  ({why})", d.name),
            None => println!("{}  {status}", d.name),
        }
        for m in &d.models {
            if m.reasoning_levels.is_empty() {
                println!("    {}", m.name);
            } else {
                println!(
                    "    {}  reasoning: {}",
                    m.name,
                    m.reasoning_levels.join(", ")
                );
            }
        }
    }
    Ok(())
}
