//! A small WebDriver client for the browser test: Debian's `chromium` and
//! `chromium-driver`, driven over the W3C WebDriver protocol with the tests'
//! own HTTP client. When they are missing, the test installs them; when it
//! cannot, it says so loudly and skips, or fails with `CI=true`.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::http;

/// The W3C name of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn find_binaries() -> Option<(PathBuf, PathBuf)> {
    let browser = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())?;
    let driver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())?;
    Some((browser, driver))
}

/// Chromium and its driver, installed from Debian's packages when missing.
fn binaries() -> Option<(PathBuf, PathBuf)> {
    if let Some(found) = find_binaries() {
        return Some(found);
    }
    eprintln!("chromium is missing: installing Debian's packages chromium and chromium-driver");
    let install = "apt-get -o DPkg::Lock::Timeout=300 install -y chromium chromium-driver || \
         (apt-get -o DPkg::Lock::Timeout=300 update && \
          apt-get -o DPkg::Lock::Timeout=300 install -y chromium chromium-driver)";
    let status = Command::new("sh").args(["-c", install]).stdout(Stdio::null()).status();
    if let Some(found) = find_binaries() {
        return Some(found);
    }
    let message = format!(
        "\n*** The browser test cannot run: chromium and chromium-driver could not be installed \
         ({status:?}). Install them with `apt-get install -y chromium chromium-driver`.\n"
    );
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{message}*** CI=true: failing instead of skipping."
    );
    eprintln!("{message}*** Skipping the browser test.");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A headless Chromium session.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    profile: PathBuf,
    /// Where screenshots go.
    pub shots: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium, or `None` (having said
    /// why) when they cannot be had outside CI.
    pub async fn start(shots: &Path) -> Option<Browser> {
        let (chromium, chromedriver) = binaries()?;
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let profile = std::env::temp_dir().join(format!("quartz-chromium-{port}"));
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            profile: profile.clone(),
            shots: shots.to_owned(),
        };
        quartz_testkit::wait_until(Duration::from_secs(20), "chromedriver to answer", || async {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        })
        .await;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-extensions", "--disable-sync",
                    "--no-first-run", "--disable-default-apps", "--window-size=1440,1000",
                    format!("--user-data-dir={}", profile.display())]
            }
        }}});
        let session = browser.command("POST", "/session", &capabilities).await.unwrap();
        browser.session = session["sessionId"].as_str().unwrap().to_owned();
        std::fs::create_dir_all(shots).unwrap();
        Some(browser)
    }

    async fn command(&self, method: &str, path: &str, body: &Value) -> Result<Value, String> {
        let body = if method == "GET" {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let answer = http::call(
            self.addr,
            method,
            path,
            &[("Content-Type", "application/json; charset=utf-8")],
            &body,
        )
        .await;
        let value = answer.json()["value"].clone();
        if answer.status == 200 {
            Ok(value)
        } else {
            Err(format!("{}: {}", value["error"], value["message"]))
        }
    }

    async fn session(&self, method: &str, path: &str, body: Value) -> Result<Value, String> {
        self.command(method, &format!("/session/{}{path}", self.session), &body)
            .await
    }

    /// Opens a URL.
    pub async fn goto(&self, url: &str) {
        self.session("POST", "/url", json!({ "url": url })).await.unwrap();
    }

    /// The page's URL.
    pub async fn url(&self) -> String {
        self.session("GET", "/url", Value::Null)
            .await
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The first element a CSS selector matches, if any.
    pub async fn try_find(&self, css: &str) -> Option<String> {
        let found = self
            .session("POST", "/element", json!({"using": "css selector", "value": css}))
            .await
            .ok()?;
        Some(
            found[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("not an element: {found}"))
                .to_owned(),
        )
    }

    /// The first element a CSS selector matches.
    pub async fn find(&self, css: &str) -> String {
        match self.try_find(css).await {
            Some(e) => e,
            None => panic!("no element matches {css:?} on {}", self.url().await),
        }
    }

    /// How many elements a CSS selector matches.
    pub async fn count(&self, css: &str) -> usize {
        self.session("POST", "/elements", json!({"using": "css selector", "value": css}))
            .await
            .map_or(0, |v| v.as_array().map_or(0, Vec::len))
    }

    /// Clears an input and types into it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.session("POST", &format!("/element/{e}/clear"), json!({}))
            .await
            .unwrap();
        self.session("POST", &format!("/element/{e}/value"), json!({ "text": text }))
            .await
            .unwrap();
    }

    /// Clicks an element.
    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.session("POST", &format!("/element/{e}/click"), json!({}))
            .await
            .unwrap();
    }

    /// An element's rendered text.
    pub async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        let text = self
            .session("GET", &format!("/element/{e}/text"), Value::Null)
            .await
            .unwrap();
        text.as_str().unwrap().to_owned()
    }

    /// Waits until an element matching `css` shows text containing `text`
    /// (a click that submits a form returns before the next page is built).
    pub async fn wait_text(&self, css: &str, text: &str) {
        quartz_testkit::wait_for(Duration::from_secs(15), &format!("{css} to show {text:?}"), || async {
            let Some(e) = self.try_find(css).await else {
                return Err(format!("no {css} on {}", self.url().await));
            };
            match self.session("GET", &format!("/element/{e}/text"), Value::Null).await {
                Ok(shown) if shown.as_str().is_some_and(|s| s.contains(text)) => Ok(()),
                Ok(shown) => Err(format!("{css} shows {shown}")),
                Err(e) => Err(e), // the page changed under the lookup
            }
        })
        .await;
    }

    /// Waits until the page's URL is `url`.
    pub async fn wait_url(&self, url: &str) {
        quartz_testkit::wait_for(Duration::from_secs(15), &format!("the page {url}"), || async {
            let now = self.url().await;
            if now == url { Ok(()) } else { Err(now) }
        })
        .await;
    }

    /// Resizes the window (its outer size, in CSS pixels).
    pub async fn resize(&self, width: u32, height: u32) {
        self.session("POST", "/window/rect", json!({"width": width, "height": height}))
            .await
            .unwrap();
    }

    /// Makes pages see `prefers-color-scheme: dark` (or light), through
    /// Chromium's DevTools protocol.
    pub async fn color_scheme(&self, scheme: &str) {
        self.session(
            "POST",
            "/goog/cdp/execute",
            json!({"cmd": "Emulation.setEmulatedMedia",
                "params": {"features": [{"name": "prefers-color-scheme", "value": scheme}]}}),
        )
        .await
        .unwrap();
    }

    /// Runs a script in the page and returns its value.
    pub async fn script(&self, script: &str) -> Value {
        self.session("POST", "/execute/sync", json!({"script": script, "args": []}))
            .await
            .unwrap()
    }

    /// The text of an open alert, if one is open.
    pub async fn alert(&self) -> Option<String> {
        self.session("GET", "/alert/text", Value::Null)
            .await
            .ok()
            .map(|v| v.as_str().unwrap_or("").to_owned())
    }

    /// Saves a screenshot of the page as `NAME.png` and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let data = self.session("GET", "/screenshot", Value::Null).await.unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Ends the session, the driver and the browser, and removes the
    /// browser's profile.
    pub async fn quit(mut self) {
        let _ = self.session("DELETE", "", Value::Null).await;
        self.end_processes();
        let _ = std::fs::remove_dir_all(&self.profile);
        self.profile = PathBuf::from("/nonexistent-quartz-profile");
    }

    /// Kills the driver, and the browser it started (found by its profile
    /// directory: a browser outlives its killed driver, and one the
    /// session's end left running was found alive after the suite), until
    /// none is left, for at most five seconds.
    fn end_processes(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let profile = format!("--user-data-dir={}", self.profile.display());
        for _ in 0..50 {
            // pkill succeeds when it found a process to signal.
            let found = Command::new("pkill")
                .args(["-KILL", "-f", "--", &profile])
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("browser processes with {profile} still alive after five seconds");
    }
}

impl Drop for Browser {
    /// On a failed test too: the driver and the browser.
    fn drop(&mut self) {
        self.end_processes();
    }
}
