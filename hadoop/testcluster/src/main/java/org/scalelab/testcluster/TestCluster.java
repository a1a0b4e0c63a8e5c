package org.scalelab.testcluster;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * ScaleLab's test cluster: HDFS (a namenode, or an HA pair, and a datanode) and, with
 * {@code --yarn N}, YARN (a ResourceManager and N NodeManagers) on 127.0.0.1, in this JVM.
 *
 * <pre>
 * java -Xmx512m -cp scalelab-testcluster.jar:lib/* org.scalelab.testcluster.TestCluster \
 *     --base-dir DIR --conf-dir DIR [--superuser-group NAME] [--ha NAMESERVICE] [--yarn N] \
 *     [--namenode-ports RPC,HTTP] [--yarn-ports RM,SCHEDULER,TRACKER,ADMIN,WEB] \
 *     [--keep-data] [--until-signal] [--kerberos [--students NAME,...] [--hub-principal NAME]]
 * </pre>
 *
 * <p>Simple authentication, permissions on ({@code dfs.permissions.enabled}), WebHDFS on, every
 * port chosen free by the system. The user who runs the JVM is the HDFS superuser (it owns the
 * namenode), and may impersonate any user ({@code hadoop.proxyuser.<user>.*}: WebHDFS's
 * {@code doas}, hdfs-native's {@code HADOOP_PROXY_USER}); members of {@code --superuser-group}
 * (default {@code supergroup}) are superusers too. Any other user name a client sends
 * ({@code HADOOP_USER_NAME}, WebHDFS's {@code user.name}) is that user, as on a real cluster with
 * simple authentication. With {@code --ha NAMESERVICE}: two namenodes, {@code nn1} (active) and
 * {@code nn2} (standby), sharing their edits, behind the nameservice. With {@code --yarn N}
 * (1 to 8): Hadoop's MiniYARNCluster, whose NodeManagers run each container as a real process
 * and kill one that uses more physical memory than it was given (see {@link #startYarn}). With
 * {@code --kerberos}: a KDC in this JVM and a secure HDFS, see {@link SecureSetup} ({@code
 * krb5.conf} and the keytabs are written into {@code --conf-dir} too); not with {@code --yarn}.
 *
 * <p>Once the cluster is up, the client configuration ({@code core-site.xml}: {@code
 * fs.defaultFS} is {@code hdfs://127.0.0.1:<rpc port>}, or {@code hdfs://NAMESERVICE};
 * {@code hdfs-site.xml}; {@code yarn-site.xml} with YARN: the ResourceManager's addresses) is
 * written into {@code --conf-dir}, for {@code HADOOP_CONF_DIR} (and {@code YARN_CONF_DIR}), and
 * ONE line of JSON goes to stdout ({@code nameservice} null without {@code --ha}, {@code yarn}
 * null without {@code --yarn}; the ports at the top are the active namenode's):
 *
 * <pre>
 * {"ready": true, "fs_default_fs": "hdfs://127.0.0.1:41234", "namenode_rpc_port": 41234,
 *  "webhdfs_port": 41235, "conf_dir": "<the --conf-dir, absolute>", "superuser": "root",
 *  "nameservice": null, "namenodes": [{"id": "nn1", "rpc_port": 41234, "http_port": 41235}],
 *  "kerberos": null,
 *  "yarn": {"resourcemanager": "127.0.0.1:41236", "scheduler": "127.0.0.1:41237",
 *           "webapp": "127.0.0.1:41238", "web_port": 41238, "nodemanagers": 2,
 *           "nodemanager_memory_mb": 4096, "nodemanager_vcores": 2,
 *           "nodemanager_log_dirs": ["...", "..."]}}
 * </pre>
 *
 * <p>({@code "kerberos"} with {@code --kerberos}: {@code {"realm": "SCALELAB.TEST", "kdc_port":
 * ..., "krb5_conf": "...", "hub": "scalelab", "students": [...], "principals": {"alice":
 * {"principal": "alice@SCALELAB.TEST", "keytab": "..."}, ...}}}.)
 *
 * <p>Nothing else is written to stdout (Hadoop's own output goes to stderr), but the answers to
 * commands: a line {@code failover} on stdin makes the active namenode of an HA pair standby and
 * the other active, answered by {@code {"active": "nn2"}} (or {@code {"error": "..."}}). The
 * cluster stops, and its data under {@code --base-dir} is deleted, when stdin closes (or on
 * SIGTERM); exit status 0 then, 1 if the cluster failed to start (the stack trace on stderr), 2
 * for bad arguments.
 *
 * <p>As a service ({@code scalelab up --hadoop}): {@code --namenode-ports} and {@code
 * --yarn-ports} fix the namenode's RPC and HTTP ports (not with {@code --ha}) and the
 * ResourceManager's five (with {@code --yarn}) instead of free ones; {@code --keep-data} keeps
 * {@code --base-dir} when the cluster stops and uses it again at the next start (formatted only
 * the first time); {@code --until-signal} reads no commands: the cluster runs until SIGTERM or
 * SIGINT.
 */
public final class TestCluster {

  private static final String USAGE =
      "usage: TestCluster --base-dir DIR --conf-dir DIR [--superuser-group NAME]"
          + " [--ha NAMESERVICE] [--yarn NODEMANAGERS]"
          + " [--namenode-ports RPC,HTTP] [--yarn-ports RM,SCHEDULER,TRACKER,ADMIN,WEB]"
          + " [--keep-data] [--until-signal]"
          + " [--kerberos [--students NAME,...] [--hub-principal NAME]]";
  private static final List<String> OPTIONS =
      List.of(
          "--base-dir", "--conf-dir", "--superuser-group", "--ha", "--yarn", "--namenode-ports",
          "--yarn-ports");
  /** Options without a value: present or not. */
  private static final List<String> FLAGS = List.of("--keep-data", "--until-signal");

  private TestCluster() {}

  public static void main(String[] args) throws Exception {
    // stdout carries the ready line and answers only: Hadoop's own output goes to stderr.
    PrintStream out = System.out;
    System.setOut(System.err);

    Map<String, String> secureOptions = new LinkedHashMap<>();
    String[] rest = SecureSetup.takeOptions(args, secureOptions);
    Map<String, String> options = rest == null ? null : parseArguments(rest);
    int nodeManagers = options == null ? 0 : nodeManagers(options.get("--yarn"));
    boolean kerberosWithYarn = nodeManagers > 0 && SecureSetup.asked(secureOptions);
    int[] namenodePorts = options == null ? null : ports(options.get("--namenode-ports"), 2);
    int[] yarnPorts = options == null ? null : ports(options.get("--yarn-ports"), 5);
    if (options == null || nodeManagers < 0 || kerberosWithYarn
        || (options.containsKey("--namenode-ports")
            && (namenodePorts == null || options.containsKey("--ha")))
        || (options.containsKey("--yarn-ports") && (yarnPorts == null || nodeManagers == 0))) {
      System.err.println(USAGE);
      System.exit(2);
    }
    boolean keepData = options.containsKey("--keep-data");
    File baseDir = new File(options.get("--base-dir")).getAbsoluteFile();
    File confDir = new File(options.get("--conf-dir")).getAbsoluteFile();
    String superuserGroup = options.getOrDefault("--superuser-group", "supergroup");
    String nameservice = options.get("--ha");
    SecureSetup secure; // with --kerberos: the KDC, started before anything asks for a user
    MiniDFSCluster cluster;
    String superuser;
    MiniYARNCluster yarn = null;
    try {
      secure = SecureSetup.startIfAsked(secureOptions, baseDir, confDir);
      superuser = secure != null
          ? secure.superuser() : UserGroupInformation.getCurrentUser().getShortUserName();
      cluster =
          start(baseDir, superuser, superuserGroup, nameservice, secure, namenodePorts, keepData);
    } catch (Exception e) {
      System.err.println("the test cluster failed to start:");
      e.printStackTrace();
      System.exit(1);
      return;
    }
    if (nodeManagers > 0) {
      try {
        yarn = startYarn(cluster.getConfiguration(0), baseDir, nodeManagers, yarnPorts);
      } catch (IOException | RuntimeException | LinkageError e) {
        System.err.println("the test cluster's YARN failed to start:");
        e.printStackTrace();
        stop(cluster, secure, keepData);
        System.exit(1);
        return;
      }
    }
    MiniYARNCluster startedYarn = yarn;
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  stopYarn(startedYarn);
                  stop(cluster, secure, keepData);
                },
                "testcluster-stop"));

    List<String> ids = nameservice == null ? List.of("nn1") : List.of("nn1", "nn2");
    List<String> namenodes = new ArrayList<>();
    for (int i = 0; i < ids.size(); i++) {
      namenodes.add(
          "{\"id\": " + quote(ids.get(i)) + ", \"rpc_port\": " + cluster.getNameNodePort(i)
              + ", \"http_port\": " + httpPort(cluster, i) + "}");
    }
    String defaultFs =
        nameservice == null
            ? "hdfs://127.0.0.1:" + cluster.getNameNodePort(0)
            : "hdfs://" + nameservice;
    writeClientConf(
        cluster, confDir, defaultFs, nameservice, ids, superuser, superuserGroup, secure);
    if (yarn != null) {
      writeYarnConf(yarn, confDir);
    }

    out.println(
        "{\"ready\": true, \"fs_default_fs\": " + quote(defaultFs)
            + ", \"namenode_rpc_port\": " + cluster.getNameNodePort(0)
            + ", \"webhdfs_port\": " + httpPort(cluster, 0)
            + ", \"conf_dir\": " + quote(confDir.getPath())
            + ", \"superuser\": " + quote(superuser)
            + ", \"nameservice\": " + (nameservice == null ? "null" : quote(nameservice))
            + ", \"namenodes\": [" + String.join(", ", namenodes) + "]"
            + ", \"kerberos\": " + (secure == null ? "null" : secure.readyJson())
            + ", \"yarn\": " + yarnReady(yarn, nodeManagers) + "}");
    out.flush();

    if (options.containsKey("--until-signal")) {
      awaitStopSignal();
    } else {
      serveCommands(cluster, ids, out);
    }
    stopYarn(yarn);
    stop(cluster, secure, keepData);
    System.exit(0);
  }

  /** Wait for SIGTERM or SIGINT ({@code --until-signal}); the cluster is then stopped by main,
   * not by the shutdown hook, in which Hadoop's own services cannot stop cleanly. */
  @SuppressWarnings("sunapi") // sun.misc.Signal: the JDK's only way to handle a signal
  private static void awaitStopSignal() throws InterruptedException {
    java.util.concurrent.CountDownLatch stop = new java.util.concurrent.CountDownLatch(1);
    for (String name : List.of("TERM", "INT")) {
      sun.misc.Signal.handle(new sun.misc.Signal(name), signal -> stop.countDown());
    }
    stop.await();
  }

  /** The ports of a {@code --namenode-ports} or {@code --yarn-ports} value: {@code count}
   * numbers from 1 to 65535, comma-separated; null when absent or malformed. */
  static int[] ports(String value, int count) {
    if (value == null) {
      return null;
    }
    String[] parts = value.split(",", -1);
    if (parts.length != count) {
      return null;
    }
    int[] ports = new int[count];
    for (int i = 0; i < count; i++) {
      try {
        ports[i] = Integer.parseInt(parts[i].trim());
      } catch (NumberFormatException e) {
        return null;
      }
      if (ports[i] < 1 || ports[i] > 65535) {
        return null;
      }
    }
    return ports;
  }

  /** {@code --name value} pairs and flags (value ""), or null when one is unknown, lacks its
   * value, or a required one is missing. */
  static Map<String, String> parseArguments(String[] args) {
    Map<String, String> options = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i += 2) {
      if (FLAGS.contains(args[i])) {
        options.put(args[i], "");
        i -= 1; // a flag takes no value
        continue;
      }
      if (!OPTIONS.contains(args[i]) || i + 1 >= args.length) {
        return null;
      }
      options.put(args[i], args[i + 1]);
    }
    if (!options.containsKey("--base-dir") || !options.containsKey("--conf-dir")) {
      return null;
    }
    return options;
  }

  private static MiniDFSCluster start(
      File baseDir, String superuser, String superuserGroup, String nameservice,
      SecureSetup secure, int[] namenodePorts, boolean keepData) throws IOException {
    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, baseDir.getPath());
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.set("dfs.permissions.superusergroup", superuserGroup);
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setInt("dfs.replication", 1);
    conf.set("hadoop.proxyuser." + superuser + ".hosts", "*");
    conf.set("hadoop.proxyuser." + superuser + ".groups", "*");
    // Few threads: one JVM on a small machine (Hadoop's defaults are sized for a server).
    conf.setInt("dfs.namenode.handler.count", 4);
    conf.setInt("dfs.namenode.service.handler.count", 2);
    conf.setInt("dfs.datanode.handler.count", 2);
    if (secure != null) {
      secure.configureCluster(conf, superuserGroup);
    }
    // Kept data: the namenode's image and the datanode's blocks of the last run, formatted only
    // the first time; the blocks are reported at once, so no wait in safe mode.
    boolean format = !(keepData && hasData(baseDir));
    if (keepData) {
      conf.setInt("dfs.namenode.safemode.extension", 0);
    }
    MiniDFSCluster.Builder builder =
        new MiniDFSCluster.Builder(conf, baseDir).numDataNodes(1).format(format);
    if (nameservice == null) {
      builder
          .nameNodePort(namenodePorts == null ? 0 : namenodePorts[0])
          .nameNodeHttpPort(namenodePorts == null ? 0 : namenodePorts[1]);
    } else {
      builder.nnTopology(
          new MiniDFSNNTopology()
              .addNameservice(
                  new MiniDFSNNTopology.NSConf(nameservice)
                      .addNN(new MiniDFSNNTopology.NNConf("nn1"))
                      .addNN(new MiniDFSNNTopology.NNConf("nn2"))));
    }
    MiniDFSCluster cluster = builder.build();
    if (nameservice != null) {
      cluster.transitionToActive(0); // both start as standby
    }
    cluster.waitActive();
    cluster.waitClusterUp();
    while (cluster.getNameNode(0).isInSafeMode()) { // kept data: until the blocks are reported
      try {
        Thread.sleep(100);
      } catch (InterruptedException e) {
        throw new IOException("interrupted while the namenode was in safe mode", e);
      }
    }
    return cluster;
  }

  /** Whether {@code baseDir} holds a namenode's data of an earlier run ({@code --keep-data}). */
  private static boolean hasData(File baseDir) {
    File[] names = baseDir.listFiles((dir, name) -> name.startsWith("name-"));
    return names != null && names.length > 0;
  }

  private static void writeClientConf(
      MiniDFSCluster cluster, File confDir, String defaultFs, String nameservice,
      List<String> ids, String superuser, String superuserGroup, SecureSetup secure)
      throws IOException {
    if (!confDir.isDirectory() && !confDir.mkdirs()) {
      throw new IOException("cannot create the configuration folder " + confDir);
    }
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", defaultFs);
    core.set("hadoop.security.authentication", "simple");
    core.set("hadoop.proxyuser." + superuser + ".hosts", "*");
    core.set("hadoop.proxyuser." + superuser + ".groups", "*");

    Configuration hdfs = new Configuration(false);
    if (nameservice == null) {
      hdfs.set("dfs.namenode.rpc-address", "127.0.0.1:" + cluster.getNameNodePort(0));
      hdfs.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort(cluster, 0));
    } else {
      hdfs.set("dfs.nameservices", nameservice);
      hdfs.set("dfs.ha.namenodes." + nameservice, String.join(",", ids));
      for (int i = 0; i < ids.size(); i++) {
        String key = nameservice + "." + ids.get(i);
        hdfs.set("dfs.namenode.rpc-address." + key, "127.0.0.1:" + cluster.getNameNodePort(i));
        hdfs.set("dfs.namenode.http-address." + key, "127.0.0.1:" + httpPort(cluster, i));
      }
      hdfs.set(
          "dfs.client.failover.proxy.provider." + nameservice,
          "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
    }
    hdfs.set("dfs.webhdfs.enabled", "true");
    hdfs.set("dfs.permissions.enabled", "true");
    hdfs.set("dfs.permissions.superusergroup", superuserGroup);
    hdfs.set("dfs.replication", "1");
    if (secure != null) {
      secure.configureClient(core, hdfs);
    }
    write(core, new File(confDir, "core-site.xml"));
    write(hdfs, new File(confDir, "hdfs-site.xml"));
  }

  /** The namenode's HTTP port, or its HTTPS port where it has only that (--kerberos). */
  private static int httpPort(MiniDFSCluster cluster, int index) {
    InetSocketAddress http = cluster.getNameNode(index).getHttpAddress();
    return (http != null ? http : cluster.getNameNode(index).getHttpsAddress()).getPort();
  }

  private static void write(Configuration conf, File file) throws IOException {
    File part = new File(file.getPath() + ".part");
    try (OutputStream out = new FileOutputStream(part)) {
      conf.writeXml(out);
    }
    if (!part.renameTo(file)) {
      throw new IOException("cannot write " + file);
    }
  }

  /** Answer commands on stdin, one a line, until it closes. */
  private static void serveCommands(MiniDFSCluster cluster, List<String> ids, PrintStream out)
      throws IOException {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    int active = 0;
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String command = line.trim();
      if (command.isEmpty()) {
        continue;
      }
      if (!command.equals("failover")) {
        out.println("{\"error\": " + quote("unknown command " + command + "; known: failover")
            + "}");
      } else if (ids.size() < 2) {
        out.println("{\"error\": \"failover needs an HA pair (--ha NAMESERVICE)\"}");
      } else {
        int next = (active + 1) % ids.size();
        try {
          cluster.transitionToStandby(active);
          cluster.transitionToActive(next);
          active = next;
          out.println("{\"active\": " + quote(ids.get(active)) + "}");
        } catch (IOException | RuntimeException e) {
          e.printStackTrace();
          out.println("{\"error\": " + quote("failover failed: " + e) + "}");
        }
      }
      out.flush();
    }
  }

  private static synchronized void stop(
      MiniDFSCluster cluster, SecureSetup secure, boolean keepData) {
    if (cluster.isClusterUp()) {
      if (keepData) { // not shutdown(false): it deletes the data folder when the JVM exits
        cluster.shutdownDataNodes();
        cluster.shutdownNameNodes();
      } else {
        cluster.shutdown(true);
      }
    }
    if (secure != null) {
      secure.stop();
    }
  }

  // -- YARN: a ResourceManager and NodeManagers (--yarn N) ----------------------------------------

  /** Memory each NodeManager offers to containers (MB): 4 GiB, room for the ApplicationMaster
   * beside an executor that runs a PyTorch rank (about 2 GiB: the JVM, torchrun and the rank,
   * each of the two importing torch), while a container over its own limit is still killed long
   * before the machine runs short. */
  static final int NODEMANAGER_MEMORY_MB = 4096;
  /** Virtual cores each NodeManager offers. */
  static final int NODEMANAGER_VCORES = 2;
  /** The smallest container (MB); requests are rounded up to a multiple of it. */
  static final int MIN_ALLOCATION_MB = 128;
  /** How often a NodeManager measures its containers' memory (ms). */
  static final int MONITOR_INTERVAL_MS = 1000;

  /** The number of NodeManagers of {@code --yarn}: 0 when absent, -1 when not a number from 1
   * to 8. */
  static int nodeManagers(String value) {
    if (value == null) {
      return 0;
    }
    try {
      int n = Integer.parseInt(value);
      return n >= 1 && n <= 8 ? n : -1;
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  /**
   * Start Hadoop's MiniYARNCluster in this JVM: one ResourceManager on 127.0.0.1 (every port
   * chosen free) and {@code nodeManagers} NodeManagers ({@code localhost}, as MiniYARNCluster
   * names them), each offering {@link #NODEMANAGER_MEMORY_MB} MB and {@link #NODEMANAGER_VCORES}
   * vcores. Containers are real processes (DefaultContainerExecutor, as the JVM's user); the
   * physical-memory check is on, so a container whose processes use more than it was given is
   * killed ("running beyond the 'PHYSICAL' memory limit", exit code 143 or 137); the
   * virtual-memory check is off (a JVM reserves far more than it uses). Its local and log
   * folders are under {@code <baseDir>/yarn}; {@code hdfsConf} (the HDFS cluster's) lets
   * NodeManagers fetch an application's files from HDFS.
   */
  private static MiniYARNCluster startYarn(
      Configuration hdfsConf, File baseDir, int nodeManagers, int[] ports) throws IOException {
    // MiniYARNCluster puts its folders under GenericTestUtils.getTestDir(), i.e. this property.
    File yarnDir = new File(baseDir, "yarn");
    System.setProperty("test.build.data", yarnDir.getPath());
    YarnConfiguration conf = new YarnConfiguration(hdfsConf);
    // Our own addresses (loopback, free ports), not MiniYARNCluster's "localhost:0".
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    for (int i = 0; i < RM_ADDRESS_KEYS.size(); i++) {
      conf.set(RM_ADDRESS_KEYS.get(i), "127.0.0.1:" + (ports == null ? 0 : ports[i]));
    }
    conf.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, NODEMANAGER_MEMORY_MB);
    conf.setInt(YarnConfiguration.NM_VCORES, NODEMANAGER_VCORES);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, MIN_ALLOCATION_MB);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, NODEMANAGER_MEMORY_MB);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, NODEMANAGER_VCORES);
    // The scheduler's queue: src/main/resources/capacity-scheduler.xml, on the classpath.

    // The memory check, as on a course cluster: MiniYARNCluster turns monitoring off unless told.
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_CONTROL_RESOURCE_MONITORING, true);
    conf.setBoolean(YarnConfiguration.NM_CONTAINER_MONITOR_ENABLED, true);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, true);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    conf.setLong(YarnConfiguration.NM_CONTAINER_MON_INTERVAL_MS, MONITOR_INTERVAL_MS);
    // A container's memory as /proc/<pid>/smaps gives it, not the sum of its processes' RSS: a
    // torchrun and its rank both map torch's libraries, whose shared pages RSS counts twice (a
    // rank's 3 GiB container was killed at "3.0 GB of 3 GB" in a run of the suite's 3 workers).
    // A process's own memory (a Python worker holding 1.4 GiB) still counts whole.
    conf.setBoolean(YarnConfiguration.PROCFS_USE_SMAPS_BASED_RSS_ENABLED, true);
    // No cgroups here: the monitor's polling enforces the limit (with "strict" enforcement on,
    // the NodeManager leaves it to the cgroup's OOM killer and never kills).
    conf.setBoolean(YarnConfiguration.NM_MEMORY_RESOURCE_ENFORCED, false);
    // A busy shared disk must not make the NodeManagers unhealthy (the default limit is 90 %).
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.0f);
    // Containers start the JVM as $JAVA_HOME/bin/java: this JVM's, when the environment has none.
    if (System.getenv("JAVA_HOME") == null) {
      conf.set(YarnConfiguration.NM_ADMIN_USER_ENV, "JAVA_HOME=" + System.getProperty("java.home"));
    }
    // Few threads: one JVM on a small machine (Hadoop's defaults are sized for a server).
    conf.setInt(YarnConfiguration.RM_CLIENT_THREAD_COUNT, 4);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_CLIENT_THREAD_COUNT, 4);
    conf.setInt(YarnConfiguration.RM_RESOURCE_TRACKER_CLIENT_THREAD_COUNT, 2);
    conf.setInt(YarnConfiguration.RM_ADMIN_CLIENT_THREAD_COUNT, 1);
    conf.setInt(YarnConfiguration.NM_CONTAINER_MGR_THREAD_COUNT, 4);
    conf.setInt(YarnConfiguration.NM_LOCALIZER_CLIENT_THREAD_COUNT, 2);
    conf.setInt(YarnConfiguration.NM_LOCALIZER_FETCH_THREAD_COUNT, 2);

    MiniYARNCluster yarn = new MiniYARNCluster("scalelab", 1, nodeManagers, 1, 1);
    yarn.init(conf);
    yarn.start();
    try {
      if (!yarn.waitForNodeManagersToConnect(60_000)) {
        throw new IOException(nodeManagers + " NodeManagers did not register within 60 s");
      }
    } catch (InterruptedException | org.apache.hadoop.yarn.exceptions.YarnException e) {
      throw new IOException("waiting for the NodeManagers: " + e, e);
    }
    return yarn;
  }

  /** The ResourceManager's addresses a client needs, as MiniYARNCluster's configuration has them
   * once started (the ports it bound). */
  private static final List<String> RM_ADDRESS_KEYS =
      List.of(
          YarnConfiguration.RM_ADDRESS,
          YarnConfiguration.RM_SCHEDULER_ADDRESS,
          YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
          YarnConfiguration.RM_ADMIN_ADDRESS,
          YarnConfiguration.RM_WEBAPP_ADDRESS);

  /** {@code yarn-site.xml} in {@code confDir}: the ResourceManager's addresses (RPC, scheduler,
   * resource tracker, admin, web), and the memory settings a client may read. */
  private static void writeYarnConf(MiniYARNCluster yarn, File confDir) throws IOException {
    Configuration started = yarn.getConfig();
    Configuration site = new Configuration(false);
    for (String key : RM_ADDRESS_KEYS) {
      site.set(key, loopback(started, key));
    }
    site.set("yarn.resourcemanager.hostname", "127.0.0.1");
    site.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, MIN_ALLOCATION_MB);
    site.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, NODEMANAGER_MEMORY_MB);
    site.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, true);
    site.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    write(site, new File(confDir, "yarn-site.xml"));
  }

  /** {@code 127.0.0.1:<port>} of a ResourceManager address the started cluster's configuration
   * has (the ResourceManager writes the port it bound there, as {@code localhost:<port>}). */
  private static String loopback(Configuration started, String key) {
    String address = started.get(key, "");
    String port = address.substring(address.lastIndexOf(':') + 1);
    if (port.isEmpty() || port.equals("0") || !port.chars().allMatch(Character::isDigit)) {
      throw new IllegalStateException("the ResourceManager has no bound address for " + key);
    }
    return "127.0.0.1:" + port;
  }

  /** The ready line's {@code "yarn"}: null without YARN, else the ResourceManager's addresses,
   * its web port and the NodeManagers' count, memory, vcores and log folders. */
  private static String yarnReady(MiniYARNCluster yarn, int nodeManagerCount) {
    if (yarn == null) {
      return "null";
    }
    Configuration conf = yarn.getConfig();
    String web = loopback(conf, YarnConfiguration.RM_WEBAPP_ADDRESS);
    List<String> logDirs = new ArrayList<>();
    for (int i = 0; i < nodeManagerCount; i++) {
      logDirs.add(quote(yarn.getNodeManager(i).getConfig().get(YarnConfiguration.NM_LOG_DIRS)));
    }
    return "{\"resourcemanager\": " + quote(loopback(conf, YarnConfiguration.RM_ADDRESS))
        + ", \"scheduler\": " + quote(loopback(conf, YarnConfiguration.RM_SCHEDULER_ADDRESS))
        + ", \"webapp\": " + quote(web)
        + ", \"web_port\": " + web.substring(web.lastIndexOf(':') + 1)
        + ", \"nodemanagers\": " + nodeManagerCount
        + ", \"nodemanager_memory_mb\": " + NODEMANAGER_MEMORY_MB
        + ", \"nodemanager_vcores\": " + NODEMANAGER_VCORES
        + ", \"nodemanager_log_dirs\": [" + String.join(", ", logDirs) + "]}";
  }

  private static synchronized void stopYarn(MiniYARNCluster yarn) {
    if (yarn != null && !yarn.isInState(org.apache.hadoop.service.Service.STATE.STOPPED)) {
      yarn.stop(); // stops the NodeManagers, which kill their containers
    }
  }

  // -- JSON ----------------------------------------------------------------------------------------

  private static String quote(String text) {
    return SecureSetup.quote(text);
  }
}
